//! A TCP proxy in front of a real server that a test can cut, as an outage of the server (or of
//! the network to it) would: [`Proxy::cut`] ends every open connection and refuses new ones
//! until [`Proxy::restore`]. The control plane and the database are shared by the tests that
//! run in parallel; an outage seen through a proxy affects only the test that owns it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::disrupt::at_thresholds;

/// Whether the proxy is cut, and how many times it was: a connection opened in one epoch ends
/// when the next cut begins.
#[derive(Clone, Copy, Debug, Default)]
struct Line {
    cut: bool,
    epoch: u64,
}

pub struct Proxy {
    addr: SocketAddr,
    line: Arc<watch::Sender<Line>>,
    refused: Arc<AtomicU64>,
    forwarded: Arc<AtomicU64>,
    accepting: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let line = Arc::new(watch::channel(Line::default()).0);
        let refused = Arc::new(AtomicU64::new(0));
        let forwarded = Arc::new(AtomicU64::new(0));
        let accepting = tokio::spawn(accept(
            listener,
            upstream,
            line.clone(),
            refused.clone(),
            forwarded.clone(),
        ));
        Ok(Proxy {
            addr,
            line,
            refused,
            forwarded,
            accepting,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Ends every open connection; new ones are closed at once until [`Proxy::restore`].
    pub fn cut(&self) {
        self.line.send_modify(|line| {
            line.cut = true;
            line.epoch += 1;
        });
    }

    pub fn restore(&self) {
        self.line.send_modify(|line| line.cut = false);
    }

    /// Connections closed at once because the proxy was cut.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    /// Connections passed on to the server: every attempt to connect while it is not cut.
    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(Ordering::SeqCst)
    }
}

/// Cuts `proxy` for `length` at each of `thresholds` (see [`at_thresholds`]); returns, per
/// outage, the count of finished nodes that set it off and the connections it refused. The
/// caller keeps its own handle on the proxy for as long as the run needs it.
pub async fn outages(
    proxy: Arc<Proxy>,
    thresholds: Vec<usize>,
    length: Duration,
    progress: mpsc::UnboundedReceiver<usize>,
) -> Vec<(usize, u64)> {
    at_thresholds(thresholds, progress, || async {
        let refused = proxy.refused();
        proxy.cut();
        tokio::time::sleep(length).await;
        proxy.restore();
        proxy.refused() - refused
    })
    .await
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.cut();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    line: Arc<watch::Sender<Line>>,
    refused: Arc<AtomicU64>,
    forwarded: Arc<AtomicU64>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let now = *line.borrow();
        if now.cut {
            refused.fetch_add(1, Ordering::SeqCst);
            drop(client);
            continue;
        }
        forwarded.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(forward(client, upstream, line.subscribe(), now.epoch));
    }
}

/// Copies both ways until either side closes or the proxy is cut.
async fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut line: watch::Receiver<Line>,
    epoch: u64,
) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    tokio::select! {
        _ = copy_bidirectional(&mut client, &mut server) => {}
        _ = line.wait_for(|l| l.epoch != epoch) => {}
    }
}
