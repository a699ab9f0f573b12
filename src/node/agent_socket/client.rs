//! The plugin's side of the agent's socket, on the ADD's hot path: the standard library only (no
//! async runtime, no Kubernetes client), every step bounded by one deadline. The connect does not
//! block either: a full backlog (an agent that stopped accepting) is an answer like any other
//! failure, and every failure is a reason the plugin logs before it takes the direct path.

use super::protocol::{Answer, MAX_LINE, Reply, Request, to_line};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Send `request` to the agent listening on `socket` and read its answer, all before `deadline`.
/// The error says why there is no usable answer (no socket, refused, timed out, garbage).
pub fn exchange(socket: &Path, request: &Request, deadline: Instant) -> Result<Answer, String> {
    let mut stream = connect_now(socket)?;
    let line = to_line(request);
    stream.set_write_timeout(Some(remaining(deadline)?)).map_err(|e| format!("socket: {e}"))?;
    stream.write_all(&line).map_err(|e| io_failure("sending to", socket, &e))?;
    let reply = read_line(&mut stream, socket, deadline)?;
    Ok(Reply::parse(&reply)?.answer)
}

/// Send `request` to the agent listening on `socket` and close the connection without reading an
/// answer, before `deadline`. For a request whose answer would change nothing the plugin does: the
/// line lands in the socket's buffer (even while the connection still waits in the agent's
/// backlog), the agent reads it on its own time, and the plugin's operation does not wait for the
/// agent to be scheduled, which on a node busy with its own work costs milliseconds per exchange.
/// The error says why the line was not sent; once sent, what becomes of it is the agent's to say.
pub fn send_without_answer(socket: &Path, request: &Request, deadline: Instant) -> Result<(), String> {
    let mut stream = connect_now(socket)?;
    stream.set_write_timeout(Some(remaining(deadline)?)).map_err(|e| format!("socket: {e}"))?;
    stream.write_all(&to_line(request)).map_err(|e| io_failure("sending to", socket, &e))?;
    // Dropping the stream closes it: the agent reads the line, then the end of the connection.
    Ok(())
}

/// Connect without waiting: the socket missing, nobody listening, or a backlog full are failures
/// at once.
fn connect_now(path: &Path) -> Result<UnixStream, String> {
    let address = UnixAddr::new(path).map_err(|e| format!("agent socket {}: {e}", path.display()))?;
    let fd = socket(AddressFamily::Unix, SockType::Stream, SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC, None)
        .map_err(|e| format!("cannot make a unix socket: {e}"))?;
    use std::os::fd::AsRawFd;
    connect(fd.as_raw_fd(), &address).map_err(|e| {
        let what = match e {
            nix::errno::Errno::ENOENT => "there is no agent socket",
            nix::errno::Errno::ECONNREFUSED => "no agent is listening",
            nix::errno::Errno::EAGAIN => "the agent is not accepting connections",
            _ => "cannot connect",
        };
        format!("{what} at {} ({e})", path.display())
    })?;
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false).map_err(|e| format!("socket: {e}"))?;
    Ok(stream)
}

/// Bytes up to the first newline, within `deadline` and `MAX_LINE`.
fn read_line(stream: &mut UnixStream, socket: &Path, deadline: Instant) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        stream.set_read_timeout(Some(remaining(deadline)?)).map_err(|e| format!("socket: {e}"))?;
        let n = stream.read(&mut chunk).map_err(|e| io_failure("reading from", socket, &e))?;
        if n == 0 {
            return Err(format!("the agent at {} closed the connection without a full answer", socket.display()));
        }
        let read_before = line.len();
        line.extend_from_slice(&chunk[..n]);
        // Only the new bytes can hold the newline.
        if let Some(end) = chunk[..n].iter().position(|b| *b == b'\n') {
            line.truncate(read_before + end);
            return Ok(line);
        }
        if line.len() > MAX_LINE {
            return Err(format!("the agent's answer is longer than {MAX_LINE} bytes"));
        }
    }
}

fn remaining(deadline: Instant) -> Result<Duration, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() { Err("no answer from the agent in time".into()) } else { Ok(left) }
}

fn io_failure(doing: &str, socket: &Path, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "no answer from the agent in time".into(),
        _ => format!("{doing} the agent at {}: {e}", socket.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::protocol::Ask;
    use super::*;
    use std::os::unix::net::UnixListener;

    fn ask() -> Request {
        Request::new(Ask::Selection { namespace: "default".into(), name: "p".into(), uid: None, wait_ms: 0 })
    }

    /// An agent stand-in answering one connection with `reply` (after reading one line).
    fn serve_once(reply: &'static [u8]) -> (tempfile::TempDir, std::path::PathBuf, std::thread::JoinHandle<()>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut byte = [0u8; 1];
            while conn.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {}
            let _ = conn.write_all(reply);
            std::thread::sleep(Duration::from_millis(300));
        });
        (dir, path, server)
    }

    /// A deadline 200 ms from now.
    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(200)
    }

    #[test]
    fn the_agents_answer_is_returned() {
        let (_dir, path, server) = serve_once(b"{\"version\":1,\"answer\":\"unknown\",\"why\":\"not seen\"}\n");
        assert_eq!(exchange(&path, &ask(), soon()).unwrap(), Answer::Unknown { why: "not seen".into() });
        server.join().unwrap();
    }

    #[test]
    fn without_an_agent_the_error_says_whether_its_socket_exists() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.sock");
        assert!(exchange(&missing, &ask(), soon()).unwrap_err().contains("there is no agent socket"));
        drop(UnixListener::bind(&missing).unwrap());
        assert!(exchange(&missing, &ask(), soon()).unwrap_err().contains("no agent is listening"));
    }

    #[test]
    fn a_half_written_answer_fails_at_the_deadline() {
        let (_dir, path, server) = serve_once(b"{\"version\":1,\"answer\":\"acc");
        let started = Instant::now();
        assert!(exchange(&path, &ask(), soon()).unwrap_err().contains("no answer from the agent in time"));
        assert!(started.elapsed() < Duration::from_millis(290), "the deadline holds: {:?}", started.elapsed());
        server.join().unwrap();
    }

    #[test]
    fn an_answer_of_another_protocol_version_is_refused() {
        let (_dir, path, server) = serve_once(b"{\"version\":7,\"answer\":\"accepted\"}\n");
        assert!(exchange(&path, &ask(), soon()).unwrap_err().contains("protocol version 7"));
        server.join().unwrap();
    }

    #[test]
    fn an_agent_that_never_accepts_fails_at_the_deadline() {
        // Listening, never accepting: the connect succeeds (backlog), the answer never comes.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stuck.sock");
        let _stuck = UnixListener::bind(&path).unwrap();
        assert!(exchange(&path, &ask(), soon()).unwrap_err().contains("in time"));
    }

    #[test]
    fn a_request_sent_without_answer_is_read_whole_after_the_plugin_has_gone() {
        let soon = || Instant::now() + Duration::from_millis(200);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        // Not accepting yet: the line waits in the connection's buffer, the sender does not.
        let listener = UnixListener::bind(&path).unwrap();
        send_without_answer(&path, &ask(), soon()).unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        let mut received = Vec::new();
        conn.read_to_end(&mut received).unwrap();
        assert_eq!(received, to_line(&ask()), "the whole line, then the end of the connection");
        assert_eq!(Request::parse(&received).unwrap(), ask());
        // The agent's reply, if it sends one, goes nowhere and harms nothing.
        assert!(conn.write_all(b"{\"version\":1,\"answer\":\"accepted\"}\n").is_err());

        drop(listener);
        assert!(send_without_answer(&path, &ask(), soon()).unwrap_err().contains("no agent is listening"));
        let missing = dir.path().join("none.sock");
        assert!(send_without_answer(&missing, &ask(), soon()).unwrap_err().contains("there is no agent socket"));
    }
}
