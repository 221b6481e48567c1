//! Messages as proto3 JSON, both ways, by prost-reflect's serde support.

use prost_reflect::{DynamicMessage, Kind, MessageDescriptor, ReflectMessage, SerializeOptions};

use crate::fail::{local, Fail};

/// `text` (one JSON object) as a message of type `desc`. The error says whether the
/// text is not JSON at all or which field does not fit the type (`what` names the
/// text: "the request", "request 3").
pub(crate) fn parse(
    desc: &MessageDescriptor,
    text: &str,
    what: &str,
) -> Result<DynamicMessage, Fail> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    DynamicMessage::deserialize(desc.clone(), &mut deserializer)
        .and_then(|m| deserializer.end().map(|()| m))
        .map_err(|e| explain(desc, text, what, &e))
}

/// Every JSON value of `text` (one per line, or any whitespace between), each as a
/// message of type `desc`.
pub(crate) fn parse_all(desc: &MessageDescriptor, text: &str) -> Result<Vec<DynamicMessage>, Fail> {
    let mut messages = Vec::new();
    let values = serde_json::Deserializer::from_str(text).into_iter::<serde_json::Value>();
    for value in values {
        let what = format!("request {}", messages.len() + 1);
        let value = value.map_err(|e| local(format!("{what} is not valid JSON: {e}")))?;
        messages.push(parse(desc, &value.to_string(), &what)?);
    }
    Ok(messages)
}

fn explain(desc: &MessageDescriptor, text: &str, what: &str, e: &serde_json::Error) -> Fail {
    if e.is_syntax() || e.is_eof() {
        return local(format!("{what} is not valid JSON: {e}"));
    }
    let field = serde_json::from_str(text)
        .ok()
        .and_then(|value| misfit_field(desc, &value));
    match field {
        Some(field) => local(format!(
            "{what} is not a valid {}: field {field}: {e}",
            desc.full_name()
        )),
        None => local(format!("{what} is not a valid {}: {e}", desc.full_name())),
    }
}

/// The path (`a.b`) of the first field of `value` that does not fit `desc`, found by
/// reading each field alone: prost-reflect's errors say what is wrong but not where.
fn misfit_field(desc: &MessageDescriptor, value: &serde_json::Value) -> Option<String> {
    let object = value.as_object()?;
    for (name, field_value) in object {
        let alone =
            serde_json::Value::Object([(name.clone(), field_value.clone())].into_iter().collect());
        if DynamicMessage::deserialize(desc.clone(), alone).is_ok() {
            continue;
        }
        let nested = desc
            .get_field_by_json_name(name)
            .or_else(|| desc.get_field_by_name(name))
            .and_then(|field| match field.kind() {
                Kind::Message(inner) if !field.is_list() && !field.is_map() => {
                    misfit_field(&inner, field_value)
                }
                _ => None,
            });
        return Some(match nested {
            Some(inner) => format!("{name}.{inner}"),
            None => name.clone(),
        });
    }
    None
}

/// `message` as one line of proto3 JSON (fields at their default value left out).
pub(crate) fn print(message: &DynamicMessage) -> Result<String, Fail> {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::new(&mut out);
    message
        .serialize_with_options(&mut serializer, &SerializeOptions::new())
        .map_err(|e| {
            local(format!(
                "printing a {} as JSON: {e}",
                message.descriptor().full_name()
            ))
        })?;
    String::from_utf8(out).map_err(local)
}
