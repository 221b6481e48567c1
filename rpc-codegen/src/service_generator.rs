//! The prost-build `ServiceGenerator` that writes rdma-rpc clients and servers.

use std::cell::RefCell;
use std::rc::Rc;

use proc_macro2::TokenStream;

use crate::model::ServiceModel;
use crate::{client, naming, server};

/// Attributes to put on generated modules of the services a path matches.
#[derive(Debug, Clone, Default)]
pub(crate) struct ModAttributes(Vec<(String, String)>);

impl ModAttributes {
    pub(crate) fn push(&mut self, path: String, attribute: String) {
        self.0.push((path, attribute));
    }

    /// Attributes whose path matches `full_name` (`pkg.Service`), as
    /// [`naming::path_matches`] says.
    fn for_service(&self, full_name: &str) -> Result<TokenStream, String> {
        let mut out = TokenStream::new();
        for (path, attribute) in &self.0 {
            if naming::path_matches(path, full_name) {
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
    /// Whether clients get `connect`.
    pub(crate) build_transport: bool,
    /// `::rpc_core::codegen`, or wherever the crate's manifest or the builder says.
    pub(crate) codegen_path: String,
    /// Where messages are, from inside a service module (`super`).
    pub(crate) proto_path: String,
    /// Whether the package is part of the service's name and call paths.
    pub(crate) emit_package: bool,
    /// Server trait methods take `self: Arc<Self>`.
    pub(crate) use_arc_self: bool,
    /// Server trait methods answer `UNIMPLEMENTED` unless implemented.
    pub(crate) generate_default_stubs: bool,
    pub(crate) client_mod_attributes: ModAttributes,
    pub(crate) server_mod_attributes: ModAttributes,
    /// On the `<Svc>Client` structs.
    pub(crate) client_attributes: ModAttributes,
    /// On the `<Svc>Server` structs.
    pub(crate) server_attributes: ModAttributes,
    /// On the server traits.
    pub(crate) trait_attributes: ModAttributes,
    /// Paths of services and methods whose proto comments are left out.
    pub(crate) disable_comments: Vec<String>,
}

/// Appends one client and/or server module per service to prost-build's output.
///
/// `ServiceGenerator::generate` cannot fail, so a service that cannot be generated
/// (clashing names, a bad attribute) is recorded in `errors`, which the builder
/// checks before writing any file: the build fails with every reason at once and no
/// half-generated output is left behind.
pub(crate) struct RpcServiceGenerator {
    pub(crate) settings: Settings,
    pub(crate) errors: Rc<RefCell<Vec<String>>>,
}

impl RpcServiceGenerator {
    fn try_generate(&self, service: &prost_build::Service) -> Result<TokenStream, Vec<String>> {
        let model = ServiceModel::new(service, &self.settings)?;
        self.tokens(&model).map_err(|e| vec![e])
    }

    fn tokens(&self, model: &ServiceModel) -> Result<TokenStream, String> {
        let s = &self.settings;
        let codegen: TokenStream = s
            .codegen_path
            .parse()
            .map_err(|e| format!("codegen path does not parse: {e}"))?;
        let name = &model.full_name;
        let mut out = TokenStream::new();
        if s.build_client {
            let attrs = client::Attributes {
                module: s.client_mod_attributes.for_service(name)?,
                client: s.client_attributes.for_service(name)?,
            };
            out.extend(client::generate(model, &codegen, &attrs, s));
        }
        if s.build_server {
            let attrs = server::Attributes {
                module: s.server_mod_attributes.for_service(name)?,
                server: s.server_attributes.for_service(name)?,
                service_trait: s.trait_attributes.for_service(name)?,
            };
            out.extend(server::generate(model, &codegen, &attrs, s));
        }
        Ok(out)
    }
}

impl RpcServiceGenerator {
    /// prost-build applies `disable_comments` to messages only; services follow the
    /// same paths (`.pkg.Service`, `.pkg.Service.Method`).
    fn drop_disabled_comments(&self, service: &mut prost_build::Service) {
        let disabled = |name: &str| {
            self.settings
                .disable_comments
                .iter()
                .any(|p| naming::path_matches(p, name))
        };
        let full_name = naming::full_service_name(&service.package, &service.proto_name);
        if disabled(&full_name) {
            service.comments = Default::default();
        }
        for method in &mut service.methods {
            if disabled(&format!("{full_name}.{}", method.proto_name)) {
                method.comments = Default::default();
            }
        }
    }
}

impl prost_build::ServiceGenerator for RpcServiceGenerator {
    fn generate(&mut self, mut service: prost_build::Service, buf: &mut String) {
        self.drop_disabled_comments(&mut service);
        match self.try_generate(&service) {
            Ok(tokens) => {
                buf.push_str(&tokens.to_string());
                buf.push('\n');
            }
            Err(errors) => self.errors.borrow_mut().extend(errors),
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
