//! The generated client: `<svc>_client::<Svc>Client<T>`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::docs::doc;
use crate::model::{MethodModel, ServiceModel};

/// `pub mod greeter_client { pub struct GreeterClient<T> { .. } .. }`.
///
/// `T` is any transport service: `Channel` in production, a mock or a middleware
/// stack in tests. The bound lives on each method (one `OutgoingCall<M>` type per
/// request message), so `new` and `Clone` work for any `T`.
pub(crate) fn generate(
    service: &ServiceModel,
    codegen: &TokenStream,
    mod_attrs: &TokenStream,
) -> TokenStream {
    let ServiceModel {
        client_ident,
        client_mod,
        full_name,
        docs,
        ..
    } = service;
    let mod_doc = doc(&format!("Client for the `{full_name}` service."));
    let connect_doc =
        doc("Connects to `dst` (`rdma://host:port`) and returns a client over the new channel.");
    let new_doc = doc("Wraps a transport service: a `Channel`, or any `tower::Service<OutgoingCall<M>>` (a mock, a middleware stack).");
    let methods = service.methods.iter().map(|m| method(m, codegen));

    quote! {
        #mod_doc
        #mod_attrs
        pub mod #client_mod {
            #docs
            #[derive(Debug, Clone)]
            pub struct #client_ident<T> {
                inner: #codegen::Grpc<T>,
            }

            impl #client_ident<#codegen::Channel> {
                #connect_doc
                pub async fn connect<D: Into<String>>(
                    dst: D,
                ) -> Result<Self, #codegen::TransportError> {
                    let channel = #codegen::Channel::connect(dst).await?;
                    Ok(Self::new(channel))
                }
            }

            impl<T> #client_ident<T> {
                #new_doc
                pub fn new(inner: T) -> Self {
                    Self { inner: #codegen::Grpc::new(inner) }
                }

                #(#methods)*
            }
        }
    }
}

fn method(m: &MethodModel, codegen: &TokenStream) -> TokenStream {
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
