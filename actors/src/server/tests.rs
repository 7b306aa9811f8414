//! A connection whose answer panics is reported to the supervision scope, with its message;
//! the client sees the connection close.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// Stands for a bug anywhere in an endpoint's answer.
fn a_bug() -> Response<Full<Bytes>> {
    panic!("a bug while answering")
}

#[tokio::test]
async fn a_connection_whose_answer_panics_is_reported_to_the_scope() {
    let scope = Supervision::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("bound");
    let served = {
        let scope = scope.clone();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accepts");
            connection("server-test", scope, stream, |_| async {
                Ok::<_, Infallible>(a_bug())
            })
            .await;
        })
    };
    let mut client = TcpStream::connect(addr).await.expect("connects");
    client
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .expect("sends");
    let mut answer = Vec::new();
    // The connection ends without an answer; a reset is an end too.
    let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer)).await;
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the connection ends")
        .expect("the panic is caught inside the connection's task");
    assert_eq!(scope.recent_restarts("server-test"), 1);
}
