//! Netlink, behind one small typed interface. One rtnetlink socket per namespace, opened once per call:
//! the host's in the plugin's own netns, the container's created by a thread inside the container
//! netns and then driven from the caller's runtime (a netlink socket stays bound to the netns it was
//! created in), so no code hops namespaces while it works.
//!
//! Every operation is a method on [`Netlink`] (links in `link`, addresses in `addr`, routes in `route`,
//! neighbours in `neigh`, policy rules in `rule`). Errors are `CniError`s that say what was being done:
//! code 106 (`ALREADY_EXISTS`) when the kernel answered EEXIST, 100 (`KERNEL`) otherwise. Lookups return
//! `Option` for "no such thing"; deletions of something already gone succeed.

mod addr;
mod link;
mod neigh;
mod route;
mod rule;

pub use addr::Address;
pub use link::{Link, MacAddr, OPER_UP_TIMEOUT, OperState, VethPair};
pub use neigh::Neighbour;
pub use netlink_packet_route::address::AddressScope;
pub use netlink_packet_route::route::{RouteProtocol, RouteScope};
pub use route::Route;
pub use rule::Rule;

use crate::platform::cni::{CniError, code};
use futures::{Stream, TryStreamExt};
use ipnetwork::IpNetwork;
use netlink_packet_route::AddressFamily;
use netlink_sys::{AsyncSocket, TokioSocket, protocols::NETLINK_ROUTE};
use nix::errno::Errno;
use std::net::IpAddr;
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
        let raw =
            crate::platform::netns::run_in(path, || netlink_sys::Socket::new(NETLINK_ROUTE).map(|s| s.into_raw_fd()))?
                .map_err(|e| CniError::kernel(format!("cannot open netlink socket in {}: {e}", path.display())))?;
        // SAFETY: `raw` was just created and is owned by nothing else.
        let socket = unsafe { TokioSocket::from_raw_fd(raw) };
        Ok(Self::from_socket(socket))
    }

    fn from_socket(socket: TokioSocket) -> Self {
        let (connection, handle, _) = rtnetlink::from_socket(socket);
        Netlink { handle, connection: tokio::spawn(connection) }
    }
}

impl Drop for Netlink {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// IPv4 or IPv6, for requests that need a family but carry no address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn of(ip: IpAddr) -> Self {
        if ip.is_ipv4() { IpFamily::V4 } else { IpFamily::V6 }
    }
    pub fn of_net(net: &IpNetwork) -> Self {
        Self::of(net.ip())
    }
    /// The distinct families of `nets`, in order of first appearance.
    pub fn distinct<'a>(nets: impl IntoIterator<Item = &'a IpNetwork>) -> Vec<IpFamily> {
        let mut out = Vec::new();
        for f in nets.into_iter().map(Self::of_net) {
            if !out.contains(&f) {
                out.push(f);
            }
        }
        out
    }
    /// The family's "everything" prefix, `0.0.0.0/0` or `::/0`.
    pub fn default_route(self) -> IpNetwork {
        match self {
            IpFamily::V4 => IpNetwork::V4(ipnetwork::Ipv4Network::new(std::net::Ipv4Addr::UNSPECIFIED, 0).unwrap()),
            IpFamily::V6 => IpNetwork::V6(ipnetwork::Ipv6Network::new(std::net::Ipv6Addr::UNSPECIFIED, 0).unwrap()),
        }
    }
    fn address_family(self) -> AddressFamily {
        match self {
            IpFamily::V4 => AddressFamily::Inet,
            IpFamily::V6 => AddressFamily::Inet6,
        }
    }
    fn from_address_family(af: AddressFamily) -> Option<Self> {
        match af {
            AddressFamily::Inet => Some(IpFamily::V4),
            AddressFamily::Inet6 => Some(IpFamily::V6),
            _ => None,
        }
    }
}

/// Whether a netlink error is the kernel's "no such thing" (ENOENT, ENODEV, ESRCH, EADDRNOTAVAIL):
/// for DEL, something already gone.
fn is_not_found(e: &rtnetlink::Error) -> bool {
    errno(e).is_some_and(|n| matches!(n, Errno::ENOENT | Errno::ENODEV | Errno::ESRCH | Errno::EADDRNOTAVAIL))
}

/// Whether a netlink error is EEXIST.
fn is_exists(e: &rtnetlink::Error) -> bool {
    errno(e) == Some(Errno::EEXIST)
}

/// The errno of a kernel error reply.
fn errno(e: &rtnetlink::Error) -> Option<Errno> {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.code.map(|c| Errno::from_raw(-c.get())),
        _ => None,
    }
}

/// Wrap a netlink error with what was being done: code 106 for EEXIST (callers test for it, e.g. to
/// retry a random name or accept an existing bridge), code 100 for everything else. The kernel's
/// errno is shown as text ("File exists (os error 17)"), not as a raw netlink message dump.
fn kernel_err(what: impl std::fmt::Display) -> impl FnOnce(rtnetlink::Error) -> CniError {
    move |e| {
        let code = if is_exists(&e) { code::ALREADY_EXISTS } else { code::KERNEL };
        let why = match errno(&e) {
            Some(n) => std::io::Error::from_raw_os_error(n as i32).to_string(),
            None => e.to_string(),
        };
        CniError::new(code, format!("{what}: {why}"))
    }
}

/// Map "not found" to `Ok(())`: the shape of every idempotent delete.
fn ok_if_gone(r: Result<(), rtnetlink::Error>, what: impl std::fmt::Display) -> Result<(), CniError> {
    match r {
        Err(e) if !is_not_found(&e) => Err(kernel_err(what)(e)),
        _ => Ok(()),
    }
}

/// Drain a dump request into a Vec.
async fn collect<T>(
    stream: impl Stream<Item = Result<T, rtnetlink::Error>>,
    what: impl std::fmt::Display,
) -> Result<Vec<T>, CniError> {
    stream.try_collect().await.map_err(kernel_err(what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::ErrorMessage;
    use std::num::NonZeroI32;

    fn kernel_error(errno: i32) -> rtnetlink::Error {
        let mut m = ErrorMessage::default();
        m.code = NonZeroI32::new(-errno);
        rtnetlink::Error::NetlinkError(m)
    }

    #[test]
    fn a_kernel_error_gets_its_cni_code_with_what_was_being_done() {
        let e = kernel_err("creating bridge cni0")(kernel_error(libc_errno::EEXIST));
        assert_eq!(e.code, code::ALREADY_EXISTS);
        assert!(e.msg.starts_with("creating bridge cni0: File exists"), "{e}");
        let e = kernel_err("x")(kernel_error(libc_errno::EPERM));
        assert_eq!(e.code, code::KERNEL);
    }

    #[test]
    fn a_missing_device_counts_as_not_found() {
        assert!(is_not_found(&kernel_error(libc_errno::ENODEV)));
        assert!(!is_not_found(&kernel_error(libc_errno::EPERM)));
    }

    #[test]
    fn ok_if_gone_forgives_only_what_is_not_found() {
        assert!(ok_if_gone(Err(kernel_error(libc_errno::ENOENT)), "x").is_ok());
        assert_eq!(ok_if_gone(Err(kernel_error(libc_errno::EPERM)), "x").unwrap_err().code, code::KERNEL);
    }

    #[test]
    fn an_address_knows_its_family() {
        assert_eq!(IpFamily::of("10.0.0.1".parse().unwrap()), IpFamily::V4);
        assert_eq!(IpFamily::of_net(&"fd00::1/64".parse().unwrap()), IpFamily::V6);
    }

    #[test]
    fn each_family_has_its_default_route() {
        assert_eq!(IpFamily::V4.default_route().to_string(), "0.0.0.0/0");
        assert_eq!(IpFamily::V6.default_route().to_string(), "::/0");
    }

    #[test]
    fn distinct_families_keep_the_order_first_seen() {
        let nets: Vec<IpNetwork> =
            ["fd00::1/64", "10.0.0.1/8", "fd01::1/64"].iter().map(|n| n.parse().unwrap()).collect();
        assert_eq!(IpFamily::distinct(&nets), [IpFamily::V6, IpFamily::V4]);
    }

    /// errno values, spelled out so the tests need no libc dependency.
    mod libc_errno {
        pub const EPERM: i32 = 1;
        pub const ENOENT: i32 = 2;
        pub const EEXIST: i32 = 17;
        pub const ENODEV: i32 = 19;
    }
}
