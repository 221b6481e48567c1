//! A service as the generators see it: names resolved, docs rendered, and the
//! checks that must fail the build (clashing names) already made.

use proc_macro2::{Ident, TokenStream};
use quote::format_ident;

use crate::docs::doc_attrs;
use crate::naming;
use crate::service_generator::Settings;

/// One service, ready for the client and server generators.
pub(crate) struct ServiceModel {
    /// The server trait: `Greeter`.
    pub(crate) trait_ident: Ident,
    /// `GreeterClient`.
    pub(crate) client_ident: Ident,
    /// `GreeterServer`.
    pub(crate) server_ident: Ident,
    /// `greeter_client`.
    pub(crate) client_mod: Ident,
    /// `greeter_server`.
    pub(crate) server_mod: Ident,
    /// `helloworld.Greeter`: what builder paths match and docs name.
    pub(crate) full_name: String,
    /// The name calls are routed on: the full name, or `Greeter` without
    /// [`Settings::emit_package`].
    pub(crate) route_name: String,
    /// Docs from the service's proto comments.
    pub(crate) docs: TokenStream,
    /// The RPCs, in proto order.
    pub(crate) methods: Vec<MethodModel>,
}

/// The four call shapes, as the proto's `stream` keywords say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// One message each way.
    Unary,
    /// One request, a stream of replies.
    ServerStreaming,
    /// A stream of requests, one reply.
    ClientStreaming,
    /// A stream each way.
    Bidirectional,
}

impl Shape {
    /// Whether the server answers with a stream (the trait has a `XStream` type).
    pub(crate) fn streams_replies(self) -> bool {
        matches!(self, Shape::ServerStreaming | Shape::Bidirectional)
    }

    /// Whether the client sends a stream (the handler gets `Request<Streaming<T>>`).
    pub(crate) fn streams_requests(self) -> bool {
        matches!(self, Shape::ClientStreaming | Shape::Bidirectional)
    }
}

/// One RPC.
pub(crate) struct MethodModel {
    /// `SayHello`.
    pub(crate) proto_name: String,
    /// `/helloworld.Greeter/SayHello`: what the client sends and the server matches on.
    pub(crate) path: String,
    /// The trait method: `say_hello` (`r#type` for keywords).
    pub(crate) server_ident: Ident,
    /// The client method: as the trait's, except [`naming::CLIENT_RESERVED`] names.
    pub(crate) client_ident: Ident,
    /// Request message type, from inside the generated modules.
    pub(crate) input: syn::Type,
    /// Response message type, from inside the generated modules.
    pub(crate) output: syn::Type,
    /// Docs from the method's proto comments.
    pub(crate) docs: TokenStream,
    /// Unary, server-, client- or bidirectional streaming.
    pub(crate) shape: Shape,
    /// The server trait's type of reply stream, `ListFeaturesStream` (tonic-build's
    /// name: the proto method name and `Stream`); used by reply-streaming shapes.
    pub(crate) stream_ident: Ident,
}

impl ServiceModel {
    /// Builds the model, or says why this service cannot be generated: every
    /// method's problem at once, so a build is not fixed one error at a time.
    pub(crate) fn new(
        service: &prost_build::Service,
        settings: &Settings,
    ) -> Result<ServiceModel, Vec<String>> {
        let full_name = naming::full_service_name(&service.package, &service.proto_name);
        let route_name = if settings.emit_package {
            full_name.clone()
        } else {
            service.proto_name.clone()
        };
        let trait_ident = naming::ident(&service.name).map_err(|e| vec![e])?;
        let stem = naming::module_stem(&service.name);
        let mut methods = Vec::new();
        let mut errors = Vec::new();
        for method in &service.methods {
            match MethodModel::new(&route_name, method, &settings.proto_path) {
                Ok(m) => methods.push(m),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        check_unique(&full_name, &methods, |m| &m.server_ident, "server trait")
            .and_then(|()| check_unique(&full_name, &methods, |m| &m.client_ident, "client"))
            .map_err(|e| vec![e])?;
        let name = trait_ident.to_string();
        let name = name.trim_start_matches("r#");
        Ok(ServiceModel {
            client_ident: format_ident!("{name}Client"),
            server_ident: format_ident!("{name}Server"),
            client_mod: format_ident!("{stem}_client"),
            server_mod: format_ident!("{stem}_server"),
            docs: doc_attrs(&service.comments, &format!("The `{full_name}` service.")),
            trait_ident,
            full_name,
            route_name,
            methods,
        })
    }
}

impl MethodModel {
    fn new(
        full_service: &str,
        method: &prost_build::Method,
        proto_path: &str,
    ) -> Result<MethodModel, String> {
        let shape = match (method.client_streaming, method.server_streaming) {
            (false, false) => Shape::Unary,
            (false, true) => Shape::ServerStreaming,
            (true, false) => Shape::ClientStreaming,
            (true, true) => Shape::Bidirectional,
        };
        let path = naming::method_path(full_service, &method.proto_name);
        Ok(MethodModel {
            server_ident: naming::ident(&method.name)?,
            client_ident: naming::ident(&naming::client_method_name(&method.name))?,
            input: naming::message_type(&method.input_type, proto_path)?,
            output: naming::message_type(&method.output_type, proto_path)?,
            docs: doc_attrs(&method.comments, &format!("Calls `{path}`.")),
            stream_ident: format_ident!("{}Stream", method.proto_name),
            proto_name: method.proto_name.clone(),
            shape,
            path,
        })
    }
}

/// Two RPCs whose names differ only in case or underscores (`GetFoo`, `get_foo`) map
/// to one Rust name: say which, rather than let rustc report a duplicate definition
/// in a file the user never wrote.
fn check_unique(
    service: &str,
    methods: &[MethodModel],
    ident: impl Fn(&MethodModel) -> &Ident,
    side: &str,
) -> Result<(), String> {
    for (i, a) in methods.iter().enumerate() {
        if let Some(b) = methods[..i].iter().find(|b| ident(b) == ident(a)) {
            return Err(format!(
                "methods `{}` and `{}` of service `{service}` both become the {side} method \
                 `{}`; rename one of them",
                b.proto_name,
                a.proto_name,
                ident(a)
            ));
        }
    }
    Ok(())
}
