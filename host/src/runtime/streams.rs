//! `wasi:io/streams` for calls with outbound HTTP: the blocking operations
//! bounded by the call's deadline.
//!
//! A policy without outbound HTTP has streams that never block (stdin is
//! closed, stdout and stderr always accept writes), and links wasmtime's
//! own. With it, a stream may be an HTTP body: a write before the request
//! is sent, or a read from a server that stops sending, blocks inside the
//! host function, where the epoch deadline cannot reach. Here every
//! blocking operation is a real wait until the call's deadline at the
//! latest; one that reaches it ends the call with `DeadlineExceeded`.

use std::time::{Duration, Instant};

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::sync::io::streams::{self, InputStream, OutputStream};
use wasmtime_wasi::p2::{StreamError, StreamResult};
use wasmtime_wasi_io::bindings::wasi::io::streams::{
    HostInputStream as AsyncInput, HostOutputStream as AsyncOutput,
};

use super::clock::Refused;

/// The streams of one call, with its deadline.
pub(crate) struct Bounded<'a> {
    pub(crate) table: &'a mut ResourceTable,
    /// When blocking operations give up.
    pub(crate) until: Instant,
    /// The call's timeout, for the error.
    pub(crate) timeout: Duration,
}

/// Gives the stream bindings a call's [`Bounded`] streams, as
/// wasmtime-wasi's views give theirs their context.
pub(crate) trait StreamsView {
    /// The call's streams, bounded by its deadline.
    fn streams(&mut self) -> Bounded<'_>;
}

/// Whether a call may reach the network: the sandbox of every policy, or
/// that and outbound HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// No network: streams never block.
    Sandbox,
    /// `wasi:http` too, blocking stream operations bounded by the deadline.
    Outbound,
}

/// Links `wasi:io/streams` to [`Bounded`].
struct BoundedStreams;

impl HasData for BoundedStreams {
    type Data<'a> = Bounded<'a>;
}

/// Links `wasi:io/streams` and `wasi:io/error` to wasmtime's own table.
struct Unbounded;

impl HasData for Unbounded {
    type Data<'a> = &'a mut ResourceTable;
}

/// The call's resource table, where wasmtime's own streams live.
fn table<T: StreamsView>(t: &mut T) -> &mut ResourceTable {
    T::streams(t).table
}

/// Links `wasi:io/error` and `wasi:io/streams` into `linker`: wasmtime's
/// own streams, which never block in the sandbox, or, for a call that may
/// reach the network, streams whose blocking operations end at the deadline.
pub(crate) fn add_to_linker<T: StreamsView + 'static>(
    linker: &mut Linker<T>,
    reach: Reach,
) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::bindings::io::error::add_to_linker::<T, Unbounded>(linker, table)?;
    match reach {
        Reach::Sandbox => streams::add_to_linker::<T, Unbounded>(linker, table),
        Reach::Outbound => streams::add_to_linker::<T, BoundedStreams>(linker, T::streams),
    }
}

impl Bounded<'_> {
    /// Runs a blocking operation until the deadline.
    fn block<T>(
        &mut self,
        operation: impl AsyncFnOnce(&mut ResourceTable) -> StreamResult<T>,
    ) -> StreamResult<T> {
        let until = self.until;
        let table = &mut *self.table;
        // The timer is made inside: it needs the runtime `in_tokio` enters.
        let done = wasmtime_wasi::runtime::in_tokio(async move {
            tokio::time::timeout_at(until.into(), operation(table)).await
        });
        done.unwrap_or_else(|_| {
            Err(StreamError::Trap(
                Refused::PastDeadline {
                    timeout: self.timeout,
                }
                .into(),
            ))
        })
    }
}

impl streams::Host for Bounded<'_> {
    fn convert_stream_error(&mut self, err: StreamError) -> wasmtime::Result<streams::StreamError> {
        streams::Host::convert_stream_error(&mut *self.table, err)
    }
}

impl streams::HostOutputStream for Bounded<'_> {
    fn drop(&mut self, stream: Resource<OutputStream>) -> wasmtime::Result<()> {
        streams::HostOutputStream::drop(&mut *self.table, stream)
    }

    fn check_write(&mut self, stream: Resource<OutputStream>) -> StreamResult<u64> {
        streams::HostOutputStream::check_write(&mut *self.table, stream)
    }

    fn write(&mut self, stream: Resource<OutputStream>, bytes: Vec<u8>) -> StreamResult<()> {
        streams::HostOutputStream::write(&mut *self.table, stream, bytes)
    }

    fn blocking_write_and_flush(
        &mut self,
        stream: Resource<OutputStream>,
        bytes: Vec<u8>,
    ) -> StreamResult<()> {
        self.block(async |table| AsyncOutput::blocking_write_and_flush(table, stream, bytes).await)
    }

    fn blocking_write_zeroes_and_flush(
        &mut self,
        stream: Resource<OutputStream>,
        len: u64,
    ) -> StreamResult<()> {
        self.block(async |table| {
            AsyncOutput::blocking_write_zeroes_and_flush(table, stream, len).await
        })
    }

    fn subscribe(
        &mut self,
        stream: Resource<OutputStream>,
    ) -> wasmtime::Result<Resource<wasmtime_wasi::p2::DynPollable>> {
        streams::HostOutputStream::subscribe(&mut *self.table, stream)
    }

    fn write_zeroes(&mut self, stream: Resource<OutputStream>, len: u64) -> StreamResult<()> {
        streams::HostOutputStream::write_zeroes(&mut *self.table, stream, len)
    }

    fn flush(&mut self, stream: Resource<OutputStream>) -> StreamResult<()> {
        streams::HostOutputStream::flush(&mut *self.table, stream)
    }

    fn blocking_flush(&mut self, stream: Resource<OutputStream>) -> StreamResult<()> {
        self.block(async |table| AsyncOutput::blocking_flush(table, stream).await)
    }

    fn splice(
        &mut self,
        dst: Resource<OutputStream>,
        src: Resource<InputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        streams::HostOutputStream::splice(&mut *self.table, dst, src, len)
    }

    fn blocking_splice(
        &mut self,
        dst: Resource<OutputStream>,
        src: Resource<InputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        self.block(async |table| AsyncOutput::blocking_splice(table, dst, src, len).await)
    }
}

/// A body's error as its `wasi:http` error code, so that the guest's
/// `http-error-code` names it (see [`crate::outbound::body_error_code`]).
fn with_code<T>(result: StreamResult<T>) -> StreamResult<T> {
    result.map_err(|error| match error {
        StreamError::LastOperationFailed(e) => {
            StreamError::LastOperationFailed(match e.downcast_ref::<wasmtime_wasi_http::Error>() {
                Some(http) => wasmtime::Error::new(crate::outbound::body_error_code(http)),
                None => e,
            })
        }
        other => other,
    })
}

impl streams::HostInputStream for Bounded<'_> {
    fn drop(&mut self, stream: Resource<InputStream>) -> wasmtime::Result<()> {
        streams::HostInputStream::drop(&mut *self.table, stream)
    }

    fn read(&mut self, stream: Resource<InputStream>, len: u64) -> StreamResult<Vec<u8>> {
        with_code(streams::HostInputStream::read(
            &mut *self.table,
            stream,
            len,
        ))
    }

    fn blocking_read(&mut self, stream: Resource<InputStream>, len: u64) -> StreamResult<Vec<u8>> {
        with_code(self.block(async |table| AsyncInput::blocking_read(table, stream, len).await))
    }

    fn skip(&mut self, stream: Resource<InputStream>, len: u64) -> StreamResult<u64> {
        with_code(streams::HostInputStream::skip(
            &mut *self.table,
            stream,
            len,
        ))
    }

    fn blocking_skip(&mut self, stream: Resource<InputStream>, len: u64) -> StreamResult<u64> {
        with_code(self.block(async |table| AsyncInput::blocking_skip(table, stream, len).await))
    }

    fn subscribe(
        &mut self,
        stream: Resource<InputStream>,
    ) -> wasmtime::Result<Resource<wasmtime_wasi::p2::DynPollable>> {
        streams::HostInputStream::subscribe(&mut *self.table, stream)
    }
}
