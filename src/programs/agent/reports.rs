//! The plugin's operation reports (`node::reports`): a unix datagram socket beside the
//! agent's, root's like it (its directory is 0700), read one datagram at a time into the metrics.
//! The plugin never waits on it: a report the agent has no room for is lost, not delayed.

use super::Shared;
use super::server::FileId;
use crate::node::paths::reports_socket;
use crate::node::reports::{MAX_REPORT, OperationReport};
use std::fs::Permissions;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use tokio::net::UnixDatagram;
use tracing::debug;

/// Bind the report socket beside `agent_socket` (whose directory `server::bind` made), replacing
/// whatever is there. Must be called inside the runtime.
pub(super) fn bind(agent_socket: &Path) -> std::io::Result<(UnixDatagram, FileId)> {
    let path = reports_socket(agent_socket);
    // Bound under a temp name and renamed into place, as the agent's socket is.
    let temporary = crate::platform::durable::temp_sibling(&path)?;
    let socket = std::os::unix::net::UnixDatagram::bind(&temporary)?;
    std::fs::set_permissions(&temporary, Permissions::from_mode(0o600))?;
    std::fs::rename(&temporary, &path)?;
    let meta = std::fs::metadata(&path)?;
    socket.set_nonblocking(true)?;
    Ok((UnixDatagram::from_std(socket)?, (meta.dev(), meta.ino())))
}

/// Read reports for as long as the agent runs.
pub(super) async fn serve(shared: Arc<Shared>, socket: UnixDatagram) -> String {
    let mut buf = vec![0u8; MAX_REPORT];
    loop {
        match socket.recv(&mut buf).await {
            Ok(n) => match OperationReport::parse(&buf[..n]) {
                Ok(report) => {
                    // A plugin at work (its DELs too): the events wait.
                    shared.events.busy();
                    shared.metrics.operation(&report)
                }
                Err(why) => {
                    debug!("a datagram on the report socket: {why}");
                    shared.metrics.malformed_report();
                }
            },
            Err(e) => return format!("reading the report socket: {e}"),
        }
    }
}
