//! The `serve` role: one system's echo server on 127.0.0.1, controlled over stdin so
//! it stops by itself when its parent goes away (stdin closes) and exits normally
//! (which valgrind needs to write its output).

use std::io::{BufRead, Write};

use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::cli::ServeArgs;
use crate::provider::Provider;
use crate::{rusage, systems};

/// First line on stdout: `listening 127.0.0.1:PORT`.
pub(crate) const LISTENING: &str = "listening";
/// Control command: reply `cpu NANOS`, this process's CPU time (user + system).
pub(crate) const CPU: &str = "cpu";
/// Control command: stop.
pub(crate) const QUIT: &str = "quit";

/// Serves until `quit` or the end of stdin.
pub(crate) async fn serve(args: ServeArgs) -> Result<(), String> {
    let provider = Provider::from_args(&args.provider)?;
    let listener = TcpListener::bind(("127.0.0.1", args.port))
        .await
        .map_err(|e| format!("binding 127.0.0.1:{}: {e}", args.port))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    // A plain thread: blocking reads of stdin, answered without the runtime.
    std::thread::spawn(move || control(stop_tx));
    println!("{LISTENING} {addr}");
    let stop = async {
        let _ = stop_rx.await;
    };
    systems::serve(args.system, listener, &provider, stop).await
}

fn control(stop: oneshot::Sender<()>) {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            CPU => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{CPU} {}", rusage::own_cpu().as_nanos());
                let _ = out.flush();
            }
            QUIT => break,
            _ => {}
        }
    }
    let _ = stop.send(());
}
