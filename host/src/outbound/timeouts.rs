//! The guest's own bounds on one request (`wasi:http` request options):
//! each step may end earlier than the call's network deadline, never later.

use std::time::Duration;

use tokio::time::Instant;
use wasmtime_wasi_http::RequestOptions;

/// How long each step of an exchange may take, as the guest asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// Resolving, connecting and the TLS handshake (`ConnectionTimeout`).
    pub(crate) connect: Option<Duration>,
    /// From sending the request to the response's head
    /// (`ConnectionReadTimeout`).
    pub(crate) first_byte: Option<Duration>,
    /// Between two frames of the response body (`ConnectionReadTimeout`).
    pub(crate) between_bytes: Option<Duration>,
}

impl Timeouts {
    /// The guest's request options, if it set any.
    pub(crate) fn of(options: Option<&RequestOptions>) -> Self {
        options.map_or_else(Self::default, |options| Self {
            connect: options.connect_timeout,
            first_byte: options.first_byte_timeout,
            between_bytes: options.between_bytes_timeout,
        })
    }
}

/// When a step that may take `timeout` from now ends: the earlier of that
/// and `deadline`.
pub(crate) fn bound(deadline: Instant, timeout: Option<Duration>) -> Instant {
    timeout
        .and_then(|timeout| Instant::now().checked_add(timeout))
        .map_or(deadline, |at| at.min(deadline))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_timeout_only_ever_shortens_the_deadline() {
        let deadline = Instant::now() + Duration::from_secs(1);
        assert_eq!(bound(deadline, None), deadline);
        assert_eq!(bound(deadline, Some(Duration::from_secs(5))), deadline);
        assert_eq!(bound(deadline, Some(Duration::MAX)), deadline);
        assert!(bound(deadline, Some(Duration::from_millis(10))) < deadline);
    }

    #[test]
    fn request_options_map_to_the_three_steps() {
        assert_eq!(Timeouts::of(None), Timeouts::default());
        let options = RequestOptions {
            connect_timeout: Some(Duration::from_millis(1)),
            first_byte_timeout: Some(Duration::from_millis(2)),
            between_bytes_timeout: None,
        };
        assert_eq!(
            Timeouts::of(Some(&options)),
            Timeouts {
                connect: Some(Duration::from_millis(1)),
                first_byte: Some(Duration::from_millis(2)),
                between_bytes: None,
            }
        );
    }
}
