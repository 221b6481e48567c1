//! Which RDMA provider rdma-rpc runs on: soft by default; verbs when built with the
//! `rdma` feature, on `--device` or the first verbs device found.

use std::time::Duration;

use rpc_core::transport::CompletionMode;
use rpc_transport::{Device, ProviderKind};

use crate::cli::{CompletionArg, ProviderArgs};

/// A resolved provider choice: the device name passed to rdma-rpc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Provider {
    kind: ProviderKind,
    device: String,
    completion: CompletionArg,
    stream_window: Option<u32>,
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
    /// Resolves `--provider`, `--device` and `--completion` against the devices present.
    pub(crate) fn from_args(args: &ProviderArgs) -> Result<Provider, String> {
        let mut p = Provider::resolve(args.provider, args.device.as_deref())?;
        p.completion = args.completion;
        p.stream_window = args.stream_window;
        Ok(p)
    }

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
                completion: CompletionArg::Default,
                stream_window: None,
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

    /// Whether this is the built-in software provider.
    pub(crate) fn is_soft(&self) -> bool {
        self.kind == ProviderKind::Soft
    }

    /// The device to open.
    pub(crate) fn device(&self) -> &str {
        &self.device
    }

    /// How rdma-rpc reaps completions.
    pub(crate) fn completion(&self) -> CompletionMode {
        match self.completion {
            CompletionArg::Default => CompletionMode::default(),
            CompletionArg::Event => CompletionMode::Event,
            CompletionArg::Busy => CompletionMode::Busy,
            CompletionArg::Adaptive => CompletionMode::Adaptive(Duration::from_micros(200)),
        }
    }

    /// Command-line arguments that select this provider in a child process.
    /// rdma-rpc's stream window (`None`: its default).
    pub(crate) fn stream_window(&self) -> Option<u32> {
        self.stream_window
    }

    pub(crate) fn args(&self) -> Vec<String> {
        let p = match self.kind {
            ProviderKind::Verbs => "verbs",
            ProviderKind::Soft => "soft",
        };
        let window = self
            .stream_window
            .map(|w| vec!["--stream-window".to_string(), w.to_string()]);
        let mut args = vec![
            "--provider".into(),
            p.into(),
            "--device".into(),
            self.device.clone(),
            "--completion".into(),
            match self.completion {
                CompletionArg::Default => "default",
                CompletionArg::Event => "event",
                CompletionArg::Busy => "busy",
                CompletionArg::Adaptive => "adaptive",
            }
            .into(),
        ];
        args.extend(window.into_iter().flatten());
        args
    }
}
