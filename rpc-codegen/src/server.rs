//! The generated server: `<svc>_server::{<Svc> (trait), <Svc>Server<T>, SERVICE_NAME}`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::docs::doc;
use crate::model::{MethodModel, ServiceModel, Shape};
use crate::service_generator::Settings;

/// Attributes the builder puts on a service's server.
pub(crate) struct Attributes {
    /// On `pub mod <svc>_server`.
    pub(crate) module: TokenStream,
    /// On `pub struct <Svc>Server`.
    pub(crate) server: TokenStream,
    /// On `pub trait <Svc>`.
    pub(crate) service_trait: TokenStream,
}

/// `pub mod greeter_server { pub trait Greeter { .. } pub struct GreeterServer<T> .. }`.
pub(crate) fn generate(
    service: &ServiceModel,
    codegen: &TokenStream,
    attrs: &Attributes,
    settings: &Settings,
) -> TokenStream {
    let ServiceModel {
        trait_ident,
        server_ident,
        server_mod,
        full_name,
        route_name,
        docs,
        ..
    } = service;
    let Attributes {
        module: mod_attrs,
        server: struct_attrs,
        service_trait: trait_attrs,
    } = attrs;
    let mod_doc = doc(&format!("Server for the `{full_name}` service."));
    let server_name = server_ident.to_string();
    // Clippy judges method names (`new` must return `Self`, `is_*`/`to_*`/`into_*`
    // take `self` in certain ways), and these come from the proto, not the user's Rust.
    let lint_allows = quote!(#[allow(clippy::new_ret_no_self, clippy::wrong_self_convention)]);
    let server_doc = doc(&format!(
        "Serves a [`{trait_ident}`] implementation: add it to a `Server` with `add_service`."
    ));
    let name_doc = doc(&format!(
        "The service's full name, `{route_name}`, which calls are routed on."
    ));
    let decoding_doc = doc(
        "Answers a call whose request message is over `limit` bytes (encoded) with \
         `OUT_OF_RANGE`, without running the handler. Default: no limit of its \
         own, only the server's `Server::max_message_size`, which is far larger than \
         tonic's default of 4 MiB here.",
    );
    let encoding_doc = doc(
        "Answers `OUT_OF_RANGE` instead of a reply whose message is over `limit` \
         bytes (encoded). Default: no limit of its own, only the server's \
         `Server::max_message_size`.",
    );
    let compression = crate::compression::methods(codegen);
    let trait_methods = service
        .methods
        .iter()
        .map(|m| trait_method(m, codegen, settings));
    let dispatch = dispatch(service, codegen, settings.use_arc_self);

    quote! {
        #mod_doc
        #mod_attrs
        pub mod #server_mod {
            #docs
            #lint_allows
            #trait_attrs
            #[#codegen::async_trait]
            pub trait #trait_ident: Send + Sync + 'static {
                #(#trait_methods)*
            }

            #server_doc
            #struct_attrs
            pub struct #server_ident<T> {
                inner: #codegen::Arc<T>,
                limits: #codegen::MessageLimits,
            }

            impl<T> #server_ident<T> {
                /// Serves `inner`.
                pub fn new(inner: T) -> Self {
                    Self::from_arc(#codegen::Arc::new(inner))
                }

                /// Serves `inner` behind `interceptor`, which sees every call first (it
                /// may check metadata, put values in the request's extensions for the
                /// handler, or answer with a status), as tonic's.
                pub fn with_interceptor<F>(
                    inner: T,
                    interceptor: F,
                ) -> #codegen::InterceptedService<Self, F>
                where
                    F: #codegen::Interceptor,
                {
                    #codegen::InterceptedService::new(Self::new(inner), interceptor)
                }

                /// Serves an implementation that is shared with other code.
                pub fn from_arc(inner: #codegen::Arc<T>) -> Self {
                    Self { inner, limits: #codegen::MessageLimits::default() }
                }

                #decoding_doc
                #[must_use]
                pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
                    self.limits.decoding = Some(limit);
                    self
                }

                #encoding_doc
                #[must_use]
                pub fn max_encoding_message_size(mut self, limit: usize) -> Self {
                    self.limits.encoding = Some(limit);
                    self
                }

                #compression
            }

            // By hand, not derived: a derive would require `T: Clone`/`T: Debug`.
            impl<T> Clone for #server_ident<T> {
                fn clone(&self) -> Self {
                    Self { inner: #codegen::Arc::clone(&self.inner), limits: self.limits }
                }
            }

            impl<T> ::core::fmt::Debug for #server_ident<T> {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.debug_struct(#server_name).finish_non_exhaustive()
                }
            }

            impl<T: #trait_ident> #codegen::Service<#codegen::ServerCall> for #server_ident<T> {
                type Response = #codegen::ServerReply;
                type Error = #codegen::Status;
                type Future = #codegen::BoxFuture<#codegen::ServerReply>;

                fn poll_ready(
                    &mut self,
                    _cx: &mut #codegen::Context<'_>,
                ) -> #codegen::Poll<Result<(), Self::Error>> {
                    #codegen::Poll::Ready(Ok(()))
                }

                fn call(&mut self, call: #codegen::ServerCall) -> Self::Future {
                    #dispatch
                }
            }

            impl<T> #codegen::NamedService for #server_ident<T> {
                const NAME: &'static str = SERVICE_NAME;
            }

            #name_doc
            pub const SERVICE_NAME: &str = #route_name;
        }
    }
}

/// One trait method in tonic-build's shape for its kind: a client stream comes in as
/// `Request<Streaming<In>>`; a reply stream is the trait's own `type XStream`,
/// declared just before the method.
fn trait_method(m: &MethodModel, codegen: &TokenStream, settings: &Settings) -> TokenStream {
    let MethodModel {
        server_ident,
        input,
        output,
        docs,
        shape,
        stream_ident,
        ..
    } = m;
    let receiver = if settings.use_arc_self {
        quote!(self: #codegen::Arc<Self>)
    } else {
        quote!(&self)
    };
    let request = if shape.streams_requests() {
        quote!(#codegen::Request<#codegen::Streaming<#input>>)
    } else {
        quote!(#codegen::Request<#input>)
    };
    let (stream_type, reply) = if shape.streams_replies() {
        let stream_doc = doc(&format!(
            "The stream of replies of [`{server_ident}`](Self::{server_ident}): the call \
             ends OK when it ends, or with its first `Err` item's status."
        ));
        (
            quote! {
                #stream_doc
                type #stream_ident: #codegen::Stream<Item = Result<#output, #codegen::Status>>
                    + Send
                    + 'static;
            },
            quote!(Self::#stream_ident),
        )
    } else {
        (TokenStream::new(), quote!(#output))
    };
    let signature = quote! {
        async fn #server_ident(
            #receiver,
            request: #request,
        ) -> Result<#codegen::Response<#reply>, #codegen::Status>
    };
    if settings.generate_default_stubs {
        quote! {
            #stream_type
            #docs
            #signature {
                drop(request);
                Err(#codegen::Status::unimplemented("Not yet implemented"))
            }
        }
    } else {
        quote! {
            #stream_type
            #docs
            #signature;
        }
    }
}

/// The body of `Service::call`: one arm per method, anything else UNIMPLEMENTED
/// with no message, as tonic's generated servers answer (with no methods, no
/// `match` at all, which clippy would flag).
fn dispatch(service: &ServiceModel, codegen: &TokenStream, arc_self: bool) -> TokenStream {
    let unimplemented = quote! {
        drop(call);
        Box::pin(async move { Err(#codegen::Status::unimplemented("")) })
    };
    if service.methods.is_empty() {
        return unimplemented;
    }
    let arms = service
        .methods
        .iter()
        .map(|m| dispatch_arm(m, &service.trait_ident, codegen, arc_self));
    quote! {
        match call.path() {
            #(#arms)*
            _ => { #unimplemented }
        }
    }
}

/// Matches the full path, as tonic does, so a server reached under another
/// service's name answers UNIMPLEMENTED rather than running a same-named method.
/// For a unary method, checks the size limit and decodes before boxing the future,
/// so a refused or undecodable body costs no allocation (streamed messages are
/// checked one by one as the handler reads them); calls the trait by its full path, so an
/// RPC named like a `Service` or `Arc` method (`call`, `clone`) cannot be resolved
/// to the wrong function.
fn dispatch_arm(
    m: &MethodModel,
    trait_ident: &proc_macro2::Ident,
    codegen: &TokenStream,
    arc_self: bool,
) -> TokenStream {
    let MethodModel {
        path,
        server_ident,
        input,
        shape,
        ..
    } = m;
    let receiver = if arc_self {
        quote!(inner)
    } else {
        quote!(&inner)
    };
    let handle = quote!(<T as #trait_ident>::#server_ident(#receiver, request).await?);
    let one_reply = quote! {
        limits.check_encoding(response.get_ref())?;
        Ok(response.map(#codegen::ReplyBody::message))
    };
    let stream_reply = quote!(Ok(#codegen::streaming_reply(response, limits)));
    let body = match shape {
        Shape::Unary => quote! {
            let request = match #codegen::unary_call_request::<#input>(call, limits) {
                Ok(request) => request,
                Err(status) => return Box::pin(async move { Err(status) }),
            };
            let inner = #codegen::Arc::clone(&self.inner);
            Box::pin(async move {
                let response = #handle;
                #one_reply
            })
        },
        // The request is the first message of the client's stream: awaited inside
        // the call's future.
        Shape::ServerStreaming => quote! {
            let inner = #codegen::Arc::clone(&self.inner);
            Box::pin(async move {
                let request = #codegen::unary_request::<#input>(call, limits).await?;
                let response = #handle;
                #stream_reply
            })
        },
        Shape::ClientStreaming | Shape::Bidirectional => {
            let reply = if shape.streams_replies() {
                stream_reply
            } else {
                one_reply
            };
            quote! {
                let request = match #codegen::streaming_request::<#input>(call, limits) {
                    Ok(request) => request,
                    Err(status) => return Box::pin(async move { Err(status) }),
                };
                let inner = #codegen::Arc::clone(&self.inner);
                Box::pin(async move {
                    let response = #handle;
                    #reply
                })
            }
        }
    };
    quote! {
        #path => {
            let limits = self.limits;
            #body
        }
    }
}
