//! The descriptors a command works from: the server's reflection service by
//! default, or `.proto` files parsed at run time, or encoded descriptor sets.

use prost_reflect::{DescriptorPool, MethodDescriptor, ServiceDescriptor};

use crate::args::SchemaArgs;
use crate::connect::Connection;
use crate::fail::{local, Fail};

mod files;
mod reflection;

/// The services a command knows, with the descriptors of their methods' messages.
#[derive(Debug)]
pub(crate) struct Schema {
    pub(crate) pool: DescriptorPool,
    /// The services the server lists (reflection), or the files define; sorted.
    pub(crate) services: Vec<String>,
}

impl Schema {
    /// From `--proto`/`--protoset` when given, else from the server's reflection
    /// service. `symbol`, when given, is fetched too if no listed service defines it
    /// (a message only a reflection client asking by name would see).
    pub(crate) async fn load(
        args: &SchemaArgs,
        connection: &Connection,
        symbol: Option<&str>,
    ) -> Result<Schema, Fail> {
        if args.protos.is_empty() && args.protosets.is_empty() {
            let channel = connection.channel().await?;
            reflection::fetch(channel, &connection.addr, symbol).await
        } else {
            files::load(args)
        }
    }

    /// A service by full name, or an error naming it and what there is.
    pub(crate) fn service(&self, name: &str) -> Result<ServiceDescriptor, Fail> {
        self.pool.get_service_by_name(name).ok_or_else(|| {
            local(format!(
                "unknown service {name} (services: {})",
                list_or_none(&self.services)
            ))
        })
    }

    /// A method named `package.Service/Method` (or `package.Service.Method`).
    pub(crate) fn method(&self, name: &str) -> Result<MethodDescriptor, Fail> {
        let (service, method) = split_method(name).ok_or_else(|| {
            local(format!(
                "{name:?} is not a method name: use package.Service/Method"
            ))
        })?;
        let service = self.service(service)?;
        let found = service.methods().find(|m| m.name() == method);
        found.ok_or_else(|| {
            let methods: Vec<String> = service.methods().map(|m| m.name().to_owned()).collect();
            local(format!(
                "unknown method {method} of service {} (methods: {})",
                service.full_name(),
                list_or_none(&methods)
            ))
        })
    }
}

/// `pkg.Service/Method` or `pkg.Service.Method` as (service, method).
pub(crate) fn split_method(name: &str) -> Option<(&str, &str)> {
    let (service, method) = name.rsplit_once('/').or_else(|| name.rsplit_once('.'))?;
    (!service.is_empty() && !method.is_empty()).then_some((service, method))
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
