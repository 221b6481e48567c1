//! The generated client: `<svc>_client::<Svc>Client<T>`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::docs::doc;
use crate::model::{MethodModel, ServiceModel, Shape};
use crate::service_generator::Settings;

/// Attributes the builder puts on a service's client.
pub(crate) struct Attributes {
    /// On `pub mod <svc>_client`.
    pub(crate) module: TokenStream,
    /// On `pub struct <Svc>Client`.
    pub(crate) client: TokenStream,
}

/// `pub mod greeter_client { pub struct GreeterClient<T> { .. } .. }`.
///
/// `T` is any transport service: `Channel` in production, a mock or a middleware
/// stack in tests. The bound lives on each method (one `OutgoingCall<M>` type per
/// unary request message, `OutgoingStream` for the streaming shapes), so `new` and
/// `Clone` work for any `T`, and a transport without streaming serves the unary
/// methods.
pub(crate) fn generate(
    service: &ServiceModel,
    codegen: &TokenStream,
    attrs: &Attributes,
    settings: &Settings,
) -> TokenStream {
    let ServiceModel {
        client_ident,
        client_mod,
        full_name,
        docs,
        ..
    } = service;
    let Attributes {
        module: mod_attrs,
        client: struct_attrs,
    } = attrs;
    let mod_doc = doc(&format!("Client for the `{full_name}` service."));
    let new_doc = doc("Wraps a transport service: a `Channel`, or any `tower::Service<OutgoingCall<M>>` (a mock, a middleware stack).");
    let connect = if settings.build_transport {
        connect(client_ident, codegen)
    } else {
        TokenStream::new()
    };
    let limits = limits();
    let compression = crate::compression::methods(codegen);
    let methods = service.methods.iter().map(|m| method(m, codegen));

    quote! {
        #mod_doc
        #mod_attrs
        pub mod #client_mod {
            #docs
            #struct_attrs
            #[derive(Debug, Clone)]
            pub struct #client_ident<T> {
                inner: #codegen::Grpc<T>,
            }

            #connect

            // Method names come from the proto: clippy's naming conventions
            // (`is_*`/`to_*`/`into_*` take `self` in certain ways) do not apply.
            #[allow(clippy::wrong_self_convention)]
            impl<T> #client_ident<T> {
                #new_doc
                pub fn new(inner: T) -> Self {
                    Self { inner: #codegen::Grpc::new(inner) }
                }

                /// A client whose every call goes through `interceptor` first (it
                /// may add metadata, or refuse the call with a status), as tonic's.
                pub fn with_interceptor<F>(
                    inner: T,
                    interceptor: F,
                ) -> #client_ident<#codegen::InterceptedService<T, F>>
                where
                    F: #codegen::Interceptor,
                {
                    #client_ident::new(#codegen::InterceptedService::new(inner, interceptor))
                }

                #limits

                #compression

                #(#methods)*
            }
        }
    }
}

/// `connect`, with tonic's bound: a `&'static str`, a `String` or an `Endpoint`.
fn connect(client_ident: &proc_macro2::Ident, codegen: &TokenStream) -> TokenStream {
    let connect_doc = doc(
        "Connects to `dst`: an address (`\"rdma://host:port\"`, `\"rdma+ud://host:port\"`) \
         or an `Endpoint` with settings, and returns a client over the new channel.",
    );
    quote! {
        impl #client_ident<#codegen::Channel> {
            #connect_doc
            pub async fn connect<D>(dst: D) -> Result<Self, #codegen::TransportError>
            where
                D: ::core::convert::TryInto<#codegen::Endpoint>,
                D::Error: Into<#codegen::StdError>,
            {
                let endpoint = dst
                    .try_into()
                    .map_err(|e| #codegen::endpoint_error(e.into()))?;
                let channel = endpoint.connect().await?;
                Ok(Self::new(channel))
            }
        }
    }
}

/// tonic's message size limits, documented where users read them.
fn limits() -> TokenStream {
    let decoding = doc(
        "Fails a reply whose encoded message is over `limit` bytes with \
         `OUT_OF_RANGE`. Default: no limit of its own, only the channel's \
         `Endpoint::max_message_size`, which is far larger than tonic's default \
         of 4 MiB here.",
    );
    let encoding = doc(
        "Fails a request whose encoded message is over `limit` bytes with \
         `INTERNAL` before anything is sent (what a tonic call ends with). Default: no limit of its own, \
         only the channel's `Endpoint::max_message_size`.",
    );
    quote! {
        #decoding
        #[must_use]
        pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
            self.inner = self.inner.max_decoding_message_size(limit);
            self
        }

        #encoding
        #[must_use]
        pub fn max_encoding_message_size(mut self, limit: usize) -> Self {
            self.inner = self.inner.max_encoding_message_size(limit);
            self
        }
    }
}

/// One client method, in tonic-build's shape for its kind: a unary or
/// server-streaming method takes `impl IntoRequest<In>`, a client-streaming or
/// bidirectional one `impl IntoStreamingRequest<Message = In>`; a reply stream is
/// `Response<Streaming<Out>>`.
fn method(m: &MethodModel, codegen: &TokenStream) -> TokenStream {
    match m.shape {
        Shape::Unary => unary(m, codegen),
        Shape::ServerStreaming => server_streaming(m, codegen),
        Shape::ClientStreaming => client_streaming(m, codegen),
        Shape::Bidirectional => bidirectional(m, codegen),
    }
}

fn unary(m: &MethodModel, codegen: &TokenStream) -> TokenStream {
    let MethodModel {
        path,
        client_ident,
        input,
        output,
        docs,
        ..
    } = m;
    quote! {
        #docs
        pub async fn #client_ident(
            &mut self,
            request: impl #codegen::IntoRequest<#input>,
        ) -> Result<#codegen::Response<#output>, #codegen::Status>
        where
            T: #codegen::Service<
                #codegen::OutgoingCall<#input>,
                Response = #codegen::IncomingReply,
                Error = #codegen::Status,
            >,
        {
            self.inner.unary(request.into_request(), #path).await
        }
    }
}

/// The bound of every streaming method: the transport takes streaming calls.
fn stream_transport(codegen: &TokenStream) -> TokenStream {
    quote! {
        T: #codegen::Service<
            #codegen::OutgoingStream,
            Response = #codegen::IncomingStream,
            Error = #codegen::Status,
        >
    }
}

fn server_streaming(m: &MethodModel, codegen: &TokenStream) -> TokenStream {
    let MethodModel {
        path,
        client_ident,
        input,
        output,
        docs,
        ..
    } = m;
    let bound = stream_transport(codegen);
    quote! {
        #docs
        pub async fn #client_ident(
            &mut self,
            request: impl #codegen::IntoRequest<#input>,
        ) -> Result<#codegen::Response<#codegen::Streaming<#output>>, #codegen::Status>
        where
            #bound,
        {
            self.inner.server_streaming(request.into_request(), #path).await
        }
    }
}

fn client_streaming(m: &MethodModel, codegen: &TokenStream) -> TokenStream {
    let MethodModel {
        path,
        client_ident,
        input,
        output,
        docs,
        ..
    } = m;
    let bound = stream_transport(codegen);
    quote! {
        #docs
        pub async fn #client_ident(
            &mut self,
            request: impl #codegen::IntoStreamingRequest<Message = #input>,
        ) -> Result<#codegen::Response<#output>, #codegen::Status>
        where
            #bound,
        {
            self.inner
                .client_streaming(request.into_streaming_request(), #path)
                .await
        }
    }
}

fn bidirectional(m: &MethodModel, codegen: &TokenStream) -> TokenStream {
    let MethodModel {
        path,
        client_ident,
        input,
        output,
        docs,
        ..
    } = m;
    let bound = stream_transport(codegen);
    quote! {
        #docs
        pub async fn #client_ident(
            &mut self,
            request: impl #codegen::IntoStreamingRequest<Message = #input>,
        ) -> Result<#codegen::Response<#codegen::Streaming<#output>>, #codegen::Status>
        where
            #bound,
        {
            self.inner
                .streaming(request.into_streaming_request(), #path)
                .await
        }
    }
}
