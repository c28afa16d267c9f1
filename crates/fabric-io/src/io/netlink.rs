//! A NETLINK_ROUTE socket that sends requests encoded elsewhere and reads their ACKs: a host's pause gate is
//! one pre-encoded RTM_NEWQDISC per change (`emulator/kernel/tc.py` encodes them), sent from the loop.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::io::set_option;

/// nlmsghdr: length, type, flags, sequence number, port.
const HEADER: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_ACK: u16 = 4;
/// The longest wait for an ACK: the kernel answers within the send, so this only bounds a lost answer.
const ACK_WAIT_US: libc::suseconds_t = 500_000;

/// A blocking route socket of the namespace it was opened in.
pub struct RouteSocket {
    fd: OwnedFd,
    seq: u32,
    message: Vec<u8>,
    reply: Vec<u8>,
}

impl RouteSocket {
    /// A route socket in the calling thread's network namespace.
    pub fn open() -> io::Result<RouteSocket> {
        let flags = libc::SOCK_RAW | libc::SOCK_CLOEXEC;
        // SAFETY: socket() takes no pointer; its result is checked before it is used as a descriptor.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, flags, libc::NETLINK_ROUTE) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by socket() and nothing else owns it; OwnedFd closes it once.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let wait = libc::timeval {
            tv_sec: 0,
            tv_usec: ACK_WAIT_US,
        };
        set_option(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, &wait)?;
        Ok(RouteSocket {
            fd,
            seq: 0,
            message: Vec::new(),
            reply: vec![0; 8192],
        })
    }

    /// Sends `request`, one netlink message that asks for an ACK, under a sequence number of its own, and
    /// reads replies up to its ACK: the kernel's refusal (or a request that asks no ACK) is the error.
    pub fn request(&mut self, request: &[u8]) -> io::Result<()> {
        let flags = request
            .get(6..8)
            .map(|f| u16::from_ne_bytes([f[0], f[1]]))
            .unwrap_or(0);
        let length = request
            .get(..4)
            .map(|l| u32::from_ne_bytes([l[0], l[1], l[2], l[3]]) as usize);
        if request.len() < HEADER || flags & NLM_F_ACK == 0 || length != Some(request.len()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not one netlink message asking for an ACK",
            ));
        }
        self.seq = self.seq.wrapping_add(1);
        self.message.clear();
        self.message.extend_from_slice(request);
        self.message[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        // SAFETY: the pointer and length are those of `self.message`, live and unborrowed during the call.
        let sent = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                self.message.as_ptr().cast(),
                self.message.len(),
                0,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        loop {
            // SAFETY: the kernel writes at most `self.reply.len()` bytes into `self.reply`, live and unborrowed.
            let got = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.reply.as_mut_ptr().cast(),
                    self.reply.len(),
                    0,
                )
            };
            let got = usize::try_from(got).map_err(|_| io::Error::last_os_error())?;
            if let Some(answer) = ack_of(&self.reply[..got.min(self.reply.len())], self.seq) {
                return answer;
            }
        }
    }
}

/// The ACK of `seq` among the messages of `reply`: Ok, or the error the kernel gave; None if it is not there.
fn ack_of(reply: &[u8], seq: u32) -> Option<io::Result<()>> {
    let mut at = 0;
    while let Some(header) = reply.get(at..at + HEADER) {
        let word =
            |i: usize| u32::from_ne_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        let (length, kind) = (word(0) as usize, u16::from_ne_bytes([header[4], header[5]]));
        if kind == NLMSG_ERROR && word(8) == seq {
            let error = reply
                .get(at + HEADER..at + HEADER + 4)
                .map(|e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]))?;
            return Some(match error {
                0 => Ok(()),
                error => Err(io::Error::from_raw_os_error(error.saturating_neg())),
            });
        }
        if length < HEADER {
            return None;
        }
        at += (length + 3) & !3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_message(seq: u32, error: i32) -> Vec<u8> {
        let mut message = Vec::new();
        message.extend_from_slice(&36u32.to_ne_bytes());
        message.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        message.extend_from_slice(&0u16.to_ne_bytes());
        message.extend_from_slice(&seq.to_ne_bytes());
        message.extend_from_slice(&0u32.to_ne_bytes());
        message.extend_from_slice(&error.to_ne_bytes());
        message.extend_from_slice(&[0; 16]); // the request's header, echoed
        message
    }

    #[test]
    fn the_ack_of_the_request_is_found_among_others() {
        let reply = [error_message(6, -22), error_message(7, 0)].concat();
        assert!(ack_of(&reply, 7).unwrap().is_ok());
        assert_eq!(
            ack_of(&reply, 6).unwrap().unwrap_err().raw_os_error(),
            Some(22)
        );
        assert!(ack_of(&reply, 8).is_none());
        assert!(ack_of(&reply[..20], 7).is_none());
        assert!(ack_of(&[0xFF; 3], 7).is_none());
    }

    #[test]
    fn a_request_without_an_ack_is_refused_before_it_is_sent() {
        let mut socket = RouteSocket::open().unwrap();
        let mut request = error_message(0, 0);
        request[4..6].copy_from_slice(&20u16.to_ne_bytes()); // RTM_GETLINK-like, no flags
        let error = socket.request(&request).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(socket.request(&[1, 2]).is_err());
        // its own length, ACK asked, but shorter than a header: refused, not a slice past its end
        let mut short = 8u32.to_ne_bytes().to_vec();
        short.extend_from_slice(&[0, 0, 4, 0]);
        assert_eq!(
            socket.request(&short).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
