//! The publisher's ROUTER replay socket: re-sends buffered batches from a sequence number.

use std::time::Duration;

use bytes::Bytes;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::wire;

/// How long one step of a replay (connect, each answer) may take.
pub(super) const REPLAY_TIMEOUT: Duration = Duration::from_secs(2);

/// Asks the ROUTER for every buffered batch from `from`: `(seq, payload)` in order, or `None`
/// if it did not answer completely in time.
pub(super) async fn replay(endpoint: &str, from: u64) -> Option<Vec<(u64, Bytes)>> {
    let mut dealer = DealerSocket::new();
    tokio::time::timeout(REPLAY_TIMEOUT, dealer.connect(endpoint))
        .await
        .ok()?
        .ok()?;
    let request = ZmqMessage::try_from(vec![
        Bytes::new(),
        Bytes::copy_from_slice(&from.to_be_bytes()),
    ])
    .ok()?;
    dealer.send(request).await.ok()?;
    let mut out = Vec::new();
    loop {
        let msg = tokio::time::timeout(REPLAY_TIMEOUT, dealer.recv())
            .await
            .ok()?
            .ok()?
            .into_vec();
        // [""(, topic), seq, payload]: 0.5.23 adds the topic; the last two frames are the same.
        let n = msg.len();
        if n < 3 {
            return None;
        }
        let seq = wire::seq(&msg[n - 2]).ok()?;
        if seq < 0 {
            return Some(out);
        }
        out.push((seq as u64, msg[n - 1].clone()));
    }
}
