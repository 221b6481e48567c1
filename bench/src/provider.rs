//! Which RDMA provider rdma-rpc runs on: soft by default; verbs when built with the
//! `rdma` feature, on `--device` or the first verbs device found.

use rpc_transport::{Device, ProviderKind};

/// A resolved provider choice: the device name passed to rdma-rpc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Provider {
    kind: ProviderKind,
    device: String,
}

/// `--provider` on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProviderArg {
    /// The built-in software RDMA provider.
    Soft,
    /// libibverbs (needs the `rdma` feature and a device).
    Verbs,
}

impl Provider {
    /// Resolves `--provider` and `--device` against the devices present.
    pub(crate) fn resolve(arg: ProviderArg, device: Option<&str>) -> Result<Provider, String> {
        let list = Device::list().map_err(|e| format!("listing RDMA devices: {e}"))?;
        let want = match arg {
            ProviderArg::Soft => ProviderKind::Soft,
            ProviderArg::Verbs => ProviderKind::Verbs,
        };
        let found = list
            .into_iter()
            .find(|d| d.provider == want && (device.is_none() || device == Some(d.name.as_str())));
        match (found, arg) {
            (Some(d), _) => Ok(Provider {
                kind: d.provider,
                device: d.name,
            }),
            (None, ProviderArg::Verbs) if !cfg!(feature = "rdma") => {
                Err("--provider verbs needs rpc-bench built with `--features rdma`".to_string())
            }
            (None, _) => Err(format!(
                "no {want} RDMA device{}",
                device.map(|n| format!(" named {n:?}")).unwrap_or_default()
            )),
        }
    }

    /// The device to open.
    pub(crate) fn device(&self) -> &str {
        &self.device
    }

    /// Command-line arguments that select this provider in a child process.
    pub(crate) fn args(&self) -> Vec<String> {
        let p = match self.kind {
            ProviderKind::Verbs => "verbs",
            ProviderKind::Soft => "soft",
        };
        vec![
            "--provider".into(),
            p.into(),
            "--device".into(),
            self.device.clone(),
        ]
    }
}
