//! The prost-build `ServiceGenerator` that writes rdma-rpc clients and servers.

use std::cell::RefCell;
use std::rc::Rc;

use proc_macro2::TokenStream;

use crate::model::ServiceModel;
use crate::{client, server};

/// Attributes to put on generated modules of the services a path matches.
#[derive(Debug, Clone, Default)]
pub(crate) struct ModAttributes(Vec<(String, String)>);

impl ModAttributes {
    pub(crate) fn push(&mut self, path: String, attribute: String) {
        self.0.push((path, attribute));
    }

    /// Attributes whose path matches `full_name` (`pkg.Service`): `.` matches every
    /// service, `.pkg` or `pkg` a package and its subpackages, `pkg.Service` one
    /// service; the leading dot is optional, as in prost-build's paths.
    fn for_service(&self, full_name: &str) -> Result<TokenStream, String> {
        let mut out = TokenStream::new();
        for (path, attribute) in &self.0 {
            let path = path.trim_start_matches('.');
            let matches = path.is_empty()
                || full_name == path
                || full_name
                    .strip_prefix(path)
                    .is_some_and(|rest| rest.starts_with('.'));
            if matches {
                let tokens: TokenStream = attribute
                    .parse()
                    .map_err(|e| format!("attribute `{attribute}` does not parse: {e}"))?;
                out.extend(tokens);
            }
        }
        Ok(out)
    }
}

/// What to generate and where generated code finds rpc-core.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) build_client: bool,
    pub(crate) build_server: bool,
    /// `::rpc_core::codegen` unless the builder says otherwise.
    pub(crate) codegen_path: String,
    pub(crate) client_mod_attributes: ModAttributes,
    pub(crate) server_mod_attributes: ModAttributes,
}

/// Appends one client and/or server module per service to prost-build's output.
///
/// `ServiceGenerator::generate` cannot fail, so a service that cannot be generated
/// (a streaming method, clashing names) is recorded in `errors`, which the builder
/// checks before writing any file: the build fails with every reason at once and no
/// half-generated output is left behind.
pub(crate) struct RpcServiceGenerator {
    pub(crate) settings: Settings,
    pub(crate) errors: Rc<RefCell<Vec<String>>>,
}

impl RpcServiceGenerator {
    fn try_generate(&self, service: &prost_build::Service) -> Result<TokenStream, String> {
        let model = ServiceModel::new(service)?;
        let codegen: TokenStream = self
            .settings
            .codegen_path
            .parse()
            .map_err(|e| format!("codegen path does not parse: {e}"))?;
        let mut out = TokenStream::new();
        if self.settings.build_client {
            let attrs = self
                .settings
                .client_mod_attributes
                .for_service(&model.full_name)?;
            out.extend(client::generate(&model, &codegen, &attrs));
        }
        if self.settings.build_server {
            let attrs = self
                .settings
                .server_mod_attributes
                .for_service(&model.full_name)?;
            out.extend(server::generate(&model, &codegen, &attrs));
        }
        Ok(out)
    }
}

impl prost_build::ServiceGenerator for RpcServiceGenerator {
    fn generate(&mut self, service: prost_build::Service, buf: &mut String) {
        match self.try_generate(&service) {
            Ok(tokens) => {
                buf.push_str(&tokens.to_string());
                buf.push('\n');
            }
            Err(e) => self.errors.borrow_mut().push(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_attribute_paths_match_packages_and_services() {
        let mut attrs = ModAttributes::default();
        attrs.push(".a.b".into(), "#[cfg(all())]".into());
        attrs.push("a.b.S".into(), "#[allow(dead_code)]".into());
        let got = |name| attrs.for_service(name).unwrap().to_string();
        assert!(got("a.b.S").contains("cfg") && got("a.b.S").contains("allow"));
        assert!(got("a.b.c.T").contains("cfg") && !got("a.b.c.T").contains("allow"));
        assert_eq!(got("a.bc.S"), "");
    }
}
