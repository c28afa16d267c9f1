//! Opening sockets inside a network namespace without moving the process: a socket keeps the namespace it
//! was opened in, so one data-plane process serves the ports of many nodes.
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Runs `f` on a thread of its own that first enters the network namespace at `path` (`/run/netns/NAME`, or
/// `/proc/PID/ns/net`): what `f` opens there stays there. The calling thread never changes namespace; the
/// helper thread ends with `f`.
pub fn within<T: Send>(path: &Path, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        let helper = scope.spawn(|| {
            let namespace = std::fs::File::open(path)?;
            // SAFETY: setns takes a descriptor, valid while `namespace` lives (to the end of this closure), and a
            // flag; it moves this thread alone, which ends when `f` returns.
            let rc = unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            f()
        });
        helper
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the namespace's thread panicked")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_no_namespace_is_an_error() {
        assert!(within(Path::new("/nonexistent/netns"), || Ok(())).is_err());
        // A file that is not a namespace: setns refuses it (EINVAL).
        assert!(within(Path::new("/proc/self/stat"), || Ok(())).is_err());
    }

    #[test]
    fn the_callers_own_namespace_runs_the_closure() {
        // Entering the namespace one is in needs CAP_SYS_ADMIN; without it the error is the kernel's, not a
        // panic. Either way the closure's value or the error comes back.
        match within(Path::new("/proc/self/ns/net"), || Ok(7)) {
            Ok(value) => assert_eq!(value, 7),
            Err(error) => assert_eq!(error.raw_os_error(), Some(libc::EPERM)),
        }
    }
}
