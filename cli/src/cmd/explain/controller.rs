//! Reading the running controller's `/explain` endpoint (on its metrics port, plain HTTP):
//! one GET with a deadline. Any failure — refused, timed out, not kerf, unreadable — is kept
//! as the answer's `error`, so the command still explains from the snapshot and says what it
//! could not know.

use std::time::Duration;

use anyhow::Context as _;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use kerf::explain::{ControllerState, Reach};

/// Longest the controller may take to answer: its answer is in-memory reads, so a slower one
/// is a wrong address or a network that drops packets, and the user should not wait on it.
const DEADLINE: Duration = Duration::from_secs(5);

/// The controller at `base` (`http://HOST:PORT`) and what it said.
pub async fn read(base: &str) -> Reach {
    let address = format!(
        "{}{}",
        base.trim_end_matches('/'),
        kerf::explain::controller::PATH
    );
    match tokio::time::timeout(DEADLINE, get(&address)).await {
        Ok(Ok(state)) => Reach {
            address,
            state: Some(state),
            error: None,
        },
        Ok(Err(error)) => Reach {
            address,
            state: None,
            error: Some(format!("{error:#}")),
        },
        Err(_) => Reach {
            address,
            state: None,
            error: Some(format!("no answer within {}s", DEADLINE.as_secs())),
        },
    }
}

async fn get(address: &str) -> anyhow::Result<ControllerState> {
    let uri: http::Uri = address
        .parse()
        .with_context(|| format!("{address:?} is not a URL"))?;
    if uri.scheme_str() != Some("http") {
        anyhow::bail!("only http:// URLs are supported (the metrics port serves plain HTTP)");
    }
    let host = uri.host().context("the URL has no host")?;
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .with_context(|| format!("connecting to {host}:{port}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("HTTP handshake")?;
    let driver = tokio::spawn(connection);
    let request = http::Request::get(uri.path())
        .header(http::header::HOST, format!("{host}:{port}"))
        .body(Empty::<Bytes>::new())
        .context("building the request")?;
    let response = sender.send_request(request).await.context("sending GET")?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .context("reading the answer")?
        .to_bytes();
    driver.abort();
    if !status.is_success() {
        anyhow::bail!(
            "answered {status} (a kerf controller older than `kerf explain`, or not kerf)"
        );
    }
    serde_json::from_slice(&body).context("reading the answer as kerf's controller state")
}
