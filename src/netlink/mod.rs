//! Netlink, behind one small interface. One rtnetlink socket per namespace, opened once per call:
//! the host's in the plugin's own netns, the container's created by a thread inside the container
//! netns and then driven from the caller's runtime (a netlink socket stays bound to the netns it was
//! created in), so no code hops namespaces while it works.

use crate::cni::{CniError, code};
use netlink_sys::{AsyncSocket, TokioSocket, protocols::NETLINK_ROUTE};
use nix::errno::Errno;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::path::Path;

pub struct Netlink {
    handle: rtnetlink::Handle,
    connection: tokio::task::JoinHandle<()>,
}

impl Netlink {
    /// A socket in the current (host) netns. Must be called inside a tokio runtime.
    pub fn host() -> Result<Self, CniError> {
        let socket = TokioSocket::new(NETLINK_ROUTE)
            .map_err(|e| CniError::kernel(format!("cannot open netlink socket: {e}")))?;
        Ok(Self::from_socket(socket))
    }

    /// A socket in the netns at `path`. Must be called inside a tokio runtime.
    pub fn in_netns(path: &Path) -> Result<Self, CniError> {
        let raw = crate::netns::run_in(path, || netlink_sys::Socket::new(NETLINK_ROUTE).map(|s| s.into_raw_fd()))?
            .map_err(|e| CniError::kernel(format!("cannot open netlink socket in {}: {e}", path.display())))?;
        // SAFETY: `raw` was just created and is owned by nothing else.
        let socket = unsafe { TokioSocket::from_raw_fd(raw) };
        Ok(Self::from_socket(socket))
    }

    fn from_socket(socket: TokioSocket) -> Self {
        let (connection, handle, _) = rtnetlink::from_socket(socket);
        Netlink { handle, connection: tokio::spawn(connection) }
    }

    pub fn handle(&self) -> &rtnetlink::Handle {
        &self.handle
    }
}

impl Drop for Netlink {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// Whether a netlink error is the kernel's "no such thing" (ENOENT, ENODEV, ESRCH, EADDRNOTAVAIL):
/// for DEL, something already gone.
pub fn is_not_found(e: &rtnetlink::Error) -> bool {
    errno(e).is_some_and(|n| matches!(n, Errno::ENOENT | Errno::ENODEV | Errno::ESRCH | Errno::EADDRNOTAVAIL))
}

/// Whether a netlink error is EEXIST.
pub fn is_exists(e: &rtnetlink::Error) -> bool {
    errno(e) == Some(Errno::EEXIST)
}

/// The errno of a kernel error reply.
pub fn errno(e: &rtnetlink::Error) -> Option<Errno> {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.code.map(|c| Errno::from_raw(-c.get())),
        _ => None,
    }
}

/// Wrap a netlink error with what was being done, as a code-100 CNI error.
pub fn kernel_err(what: impl std::fmt::Display) -> impl FnOnce(rtnetlink::Error) -> CniError {
    move |e| CniError::new(code::KERNEL, format!("{what}: {e}"))
}
