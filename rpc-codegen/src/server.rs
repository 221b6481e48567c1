//! The generated server: `<svc>_server::{<Svc> (trait), <Svc>Server<T>, SERVICE_NAME}`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::docs::doc;
use crate::model::{MethodModel, ServiceModel};

/// `pub mod greeter_server { pub trait Greeter { .. } pub struct GreeterServer<T> .. }`.
pub(crate) fn generate(
    service: &ServiceModel,
    codegen: &TokenStream,
    mod_attrs: &TokenStream,
) -> TokenStream {
    let ServiceModel {
        trait_ident,
        server_ident,
        server_mod,
        full_name,
        docs,
        ..
    } = service;
    let mod_doc = doc(&format!("Server for the `{full_name}` service."));
    let server_name = server_ident.to_string();
    let server_doc = doc(&format!(
        "Serves a [`{trait_ident}`] implementation: add it to a `Server` with `add_service`."
    ));
    let name_doc = doc(&format!(
        "The service's full name, `{full_name}`, which calls are routed on."
    ));
    let trait_methods = service.methods.iter().map(|m| trait_method(m, codegen));
    let arms = service
        .methods
        .iter()
        .map(|m| dispatch_arm(m, trait_ident, codegen));

    quote! {
        #mod_doc
        #mod_attrs
        pub mod #server_mod {
            #docs
            #[#codegen::async_trait]
            pub trait #trait_ident: Send + Sync + 'static {
                #(#trait_methods)*
            }

            #server_doc
            pub struct #server_ident<T> {
                inner: #codegen::Arc<T>,
            }

            impl<T> #server_ident<T> {
                /// Serves `inner`.
                pub fn new(inner: T) -> Self {
                    Self::from_arc(#codegen::Arc::new(inner))
                }

                /// Serves an implementation that is shared with other code.
                pub fn from_arc(inner: #codegen::Arc<T>) -> Self {
                    Self { inner }
                }
            }

            // By hand, not derived: a derive would require `T: Clone`/`T: Debug`.
            impl<T> Clone for #server_ident<T> {
                fn clone(&self) -> Self {
                    Self { inner: #codegen::Arc::clone(&self.inner) }
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
                    match call.method() {
                        #(#arms)*
                        method => {
                            let status = #codegen::Status::unimplemented(format!(
                                "method {method} not found in service {SERVICE_NAME}"
                            ));
                            Box::pin(async move { Err(status) })
                        }
                    }
                }
            }

            impl<T> #codegen::NamedService for #server_ident<T> {
                const NAME: &'static str = SERVICE_NAME;
            }

            #name_doc
            pub const SERVICE_NAME: &str = #full_name;
        }
    }
}

fn trait_method(m: &MethodModel, codegen: &TokenStream) -> TokenStream {
    let MethodModel {
        server_ident,
        input,
        output,
        docs,
        ..
    } = m;
    quote! {
        #docs
        async fn #server_ident(
            &self,
            request: #codegen::Request<#input>,
        ) -> Result<#codegen::Response<#output>, #codegen::Status>;
    }
}

/// Decodes before boxing the future, so a body that does not decode costs no
/// allocation; calls the trait by its full path, so an RPC named like a `Service`
/// or `Arc` method (`call`, `clone`) cannot be resolved to the wrong function.
fn dispatch_arm(
    m: &MethodModel,
    trait_ident: &proc_macro2::Ident,
    codegen: &TokenStream,
) -> TokenStream {
    let MethodModel {
        proto_name,
        server_ident,
        input,
        ..
    } = m;
    quote! {
        #proto_name => {
            let request = match call.into_request::<#input>() {
                Ok(request) => request,
                Err(status) => return Box::pin(async move { Err(status) }),
            };
            let inner = #codegen::Arc::clone(&self.inner);
            Box::pin(async move {
                let response = <T as #trait_ident>::#server_ident(&inner, request).await?;
                Ok(response.map(|message| Box::new(message) as #codegen::BoxMessage))
            })
        }
    }
}
