//! `rdma-rpc describe`: a service, method, message or enum in proto syntax.

use std::fmt::Write;

use prost_reflect::{
    Cardinality, EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor, MethodDescriptor,
    ServiceDescriptor,
};

use crate::args::DescribeArgs;
use crate::connect::Connection;
use crate::fail::{local, Fail};
use crate::schema::{split_method, Schema};

pub(crate) async fn run(args: DescribeArgs) -> Result<(), Fail> {
    let connection = Connection::new(&args.target)?;
    let schema = Schema::load(&args.schema, &connection, Some(&args.symbol)).await?;
    print!("{}", describe(&schema, &args.symbol)?);
    Ok(())
}

fn describe(schema: &Schema, symbol: &str) -> Result<String, Fail> {
    let pool = &schema.pool;
    let symbol = symbol.trim_start_matches('.');
    if let Some(service) = pool.get_service_by_name(symbol) {
        return Ok(format!(
            "{symbol} is a service:\n{}",
            service_text(&service)
        ));
    }
    if let Some(message) = pool.get_message_by_name(symbol) {
        return Ok(format!(
            "{symbol} is a message:\n{}",
            message_text(&message, "")
        ));
    }
    if let Some(enumeration) = pool.get_enum_by_name(symbol) {
        return Ok(format!(
            "{symbol} is an enum:\n{}",
            enum_text(&enumeration, "")
        ));
    }
    if let Some((service, method)) = split_method(symbol) {
        if let Some(method) = pool
            .get_service_by_name(service)
            .and_then(|s| s.methods().find(|m| m.name() == method))
        {
            return Ok(format!(
                "{} is a method:\n{}\n",
                method.full_name(),
                method_text(&method)
            ));
        }
    }
    Err(local(format!("unknown symbol {symbol}")))
}

fn service_text(service: &ServiceDescriptor) -> String {
    let mut text = format!("service {} {{\n", service.name());
    for method in service.methods() {
        let _ = writeln!(text, "  {}", method_text(&method));
    }
    text.push_str("}\n");
    text
}

fn method_text(method: &MethodDescriptor) -> String {
    let stream = |yes: bool| if yes { "stream " } else { "" };
    format!(
        "rpc {}({}.{}) returns ({}.{});",
        method.name(),
        stream(method.is_client_streaming()),
        method.input().full_name(),
        stream(method.is_server_streaming()),
        method.output().full_name()
    )
}

fn message_text(message: &MessageDescriptor, indent: &str) -> String {
    let mut text = format!("{indent}message {} {{\n", message.name());
    let inner = format!("{indent}  ");
    for nested in message.child_messages().filter(|m| !m.is_map_entry()) {
        text.push_str(&message_text(&nested, &inner));
    }
    for enumeration in message.child_enums() {
        text.push_str(&enum_text(&enumeration, &inner));
    }
    let mut oneofs_done = Vec::new();
    for field in message.fields() {
        match field.containing_oneof().filter(|o| !o.is_synthetic()) {
            None => {
                let _ = writeln!(text, "{inner}{}", field_text(&field));
            }
            Some(oneof) if !oneofs_done.contains(&oneof.name().to_owned()) => {
                oneofs_done.push(oneof.name().to_owned());
                let _ = writeln!(text, "{inner}oneof {} {{", oneof.name());
                for member in oneof.fields() {
                    let _ = writeln!(text, "{inner}  {}", field_text(&member));
                }
                let _ = writeln!(text, "{inner}}}");
            }
            Some(_) => {}
        }
    }
    let _ = writeln!(text, "{indent}}}");
    text
}

fn field_text(field: &FieldDescriptor) -> String {
    let label = if field.is_map() {
        ""
    } else if field.is_list() {
        "repeated "
    } else if field.cardinality() == Cardinality::Required {
        "required "
    } else if field.field_descriptor_proto().proto3_optional() {
        "optional "
    } else {
        ""
    };
    let kind = match field.kind() {
        Kind::Message(entry) if field.is_map() => format!(
            "map<{}, {}>",
            kind_name(&entry.map_entry_key_field().kind()),
            kind_name(&entry.map_entry_value_field().kind())
        ),
        kind => kind_name(&kind),
    };
    format!("{label}{kind} {} = {};", field.name(), field.number())
}

fn kind_name(kind: &Kind) -> String {
    match kind {
        Kind::Double => "double".into(),
        Kind::Float => "float".into(),
        Kind::Int32 => "int32".into(),
        Kind::Int64 => "int64".into(),
        Kind::Uint32 => "uint32".into(),
        Kind::Uint64 => "uint64".into(),
        Kind::Sint32 => "sint32".into(),
        Kind::Sint64 => "sint64".into(),
        Kind::Fixed32 => "fixed32".into(),
        Kind::Fixed64 => "fixed64".into(),
        Kind::Sfixed32 => "sfixed32".into(),
        Kind::Sfixed64 => "sfixed64".into(),
        Kind::Bool => "bool".into(),
        Kind::String => "string".into(),
        Kind::Bytes => "bytes".into(),
        Kind::Message(m) => format!(".{}", m.full_name()),
        Kind::Enum(e) => format!(".{}", e.full_name()),
    }
}

fn enum_text(enumeration: &EnumDescriptor, indent: &str) -> String {
    let mut text = format!("{indent}enum {} {{\n", enumeration.name());
    for value in enumeration.values() {
        let _ = writeln!(text, "{indent}  {} = {};", value.name(), value.number());
    }
    let _ = writeln!(text, "{indent}}}");
    text
}
