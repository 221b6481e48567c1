//! The soak's server: this program again (`--serve`), in a process of its own so
//! that its footprint is the server's alone.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use examples::greeter::MyGreeter;
use examples::hello_world::greeter_server::GreeterServer;
use rpc_core::transport::Server;

/// In the child: serve the greeter with default settings on 127.0.0.1 until stdin
/// closes, printing the port first.
pub(crate) async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("PORT {}", listener.local_addr()?.port());
    // Stdin is read on a blocking thread: its end is the parent saying stop.
    let eof = tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new()));
    let stop = async {
        let _ = eof.await;
    };
    Server::builder()
        .add_service(GreeterServer::new(MyGreeter))
        .serve_with_listener(listener, stop)
        .await?;
    Ok(())
}

/// The server child; stopped (stdin closed, then waited for) when dropped.
pub(crate) struct Child {
    child: std::process::Child,
    pub(crate) port: u16,
    pub(crate) pid: u32,
}

impl Child {
    pub(crate) fn spawn() -> std::io::Result<Child> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        out.read_line(&mut line)?;
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("server child said {line:?}")))?;
        let pid = child.id();
        Ok(Child { child, port, pid })
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}
