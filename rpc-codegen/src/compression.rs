//! The generated clients' and servers' `send_compressed`/`accept_compressed`,
//! tonic-build's signatures with no effect (rdma-rpc compresses nothing; see
//! `rpc_core::codec::CompressionEncoding`).

use proc_macro2::TokenStream;
use quote::quote;

use crate::docs::doc;

/// The two methods, for a client or a server type (`codegen`: the path of
/// rpc-core's `codegen` module).
pub(crate) fn methods(codegen: &TokenStream) -> TokenStream {
    let send = doc(
        "Accepted as tonic's; no effect: rdma-rpc sends every message uncompressed \
         (an RDMA fabric moves it without copies, which compressing would add back).",
    );
    let accept = doc(
        "Accepted as tonic's; no effect: messages arrive uncompressed, since no \
         rdma-rpc peer compresses.",
    );
    quote! {
        #send
        #[must_use]
        pub fn send_compressed(self, _encoding: #codegen::CompressionEncoding) -> Self {
            self
        }

        #accept
        #[must_use]
        pub fn accept_compressed(self, _encoding: #codegen::CompressionEncoding) -> Self {
            self
        }
    }
}
