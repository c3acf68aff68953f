//! [`super::Request::send`] in the component: one `wasi:http` exchange,
//! blocking, through the Bytecode Alliance's own bindings (`wasip2`).
//!
//! The request is handed to the host before its body is written, so the
//! host drains the body as it goes; the response body is read whole (the
//! grant caps its size).

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, Method as WasiMethod, OutgoingBody, OutgoingRequest,
    RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

use super::{Error, Method, Request, Response, Timeouts, Url};

/// The request options carrying `timeouts`, if any is set.
fn options(timeouts: Timeouts) -> Result<Option<RequestOptions>, Error> {
    if timeouts == Timeouts::default() {
        return Ok(None);
    }
    let nanos = |timeout: Option<std::time::Duration>| {
        timeout.map(|t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX))
    };
    let options = RequestOptions::new();
    let refused = |step: &str| Error::Refused {
        code: format!("the host takes no {step} timeout"),
    };
    options
        .set_connect_timeout(nanos(timeouts.connect))
        .map_err(|()| refused("connect"))?;
    options
        .set_first_byte_timeout(nanos(timeouts.first_byte))
        .map_err(|()| refused("first-byte"))?;
    options
        .set_between_bytes_timeout(nanos(timeouts.between_bytes))
        .map_err(|()| refused("between-bytes"))?;
    Ok(Some(options))
}

/// Most bytes one `blocking-write-and-flush` takes.
const WRITE_CHUNK: usize = 4096;
/// Bytes asked for per read.
const READ_CHUNK: u64 = 64 << 10;

pub(super) fn send(request: &Request, url: &Url<'_>) -> Result<Response, Error> {
    let bad_url = || Error::Url {
        url: request.url.clone(),
    };
    let headers = Fields::new();
    for (name, value) in &request.headers {
        headers
            .append(name, value.as_bytes())
            .map_err(|error| Error::Refused {
                code: format!("header `{name}`: {error:?}"),
            })?;
    }
    let outgoing = OutgoingRequest::new(headers);
    let scheme = if url.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    outgoing
        .set_method(&method(&request.method))
        .map_err(|()| bad_url())?;
    outgoing.set_scheme(Some(&scheme)).map_err(|()| bad_url())?;
    outgoing
        .set_authority(Some(url.authority))
        .map_err(|()| bad_url())?;
    outgoing
        .set_path_with_query(Some(url.path_and_query))
        .map_err(|()| bad_url())?;
    let body = outgoing
        .body()
        .map_err(|()| failed("the request body was taken"))?;
    let options = options(request.timeouts)?;
    let future = outgoing_handler::handle(outgoing, options).map_err(|code| error(&code))?;
    // A body the host stopped taking (a refusal, a failed exchange) says
    // only that its stream closed: the answer below says why.
    let written = write_body(&body, &request.body)
        .and_then(|()| OutgoingBody::finish(body, None).map_err(|code| error(&code)));
    let response = loop {
        match future.get() {
            Some(answer) => break answer,
            None => future.subscribe().block(),
        }
    };
    let response = response
        .map_err(|()| failed("the response was already taken"))?
        .map_err(|code| error(&code))?;
    written?;
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(name, value)| {
            (
                name.to_ascii_lowercase(),
                String::from_utf8_lossy(&value).into_owned(),
            )
        })
        .collect();
    let incoming = response
        .consume()
        .map_err(|()| failed("the response body was taken"))?;
    let body = read_body(&incoming)?;
    drop(IncomingBody::finish(incoming));
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn write_body(body: &OutgoingBody, bytes: &[u8]) -> Result<(), Error> {
    if bytes.is_empty() {
        return Ok(());
    }
    let stream = body
        .write()
        .map_err(|()| failed("the request body stream was taken"))?;
    for chunk in bytes.chunks(WRITE_CHUNK) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(stream_error)?;
    }
    Ok(())
}

fn read_body(body: &IncomingBody) -> Result<Vec<u8>, Error> {
    let stream = body
        .stream()
        .map_err(|()| failed("the response body stream was taken"))?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(READ_CHUNK) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok(bytes),
            Err(other) => return Err(stream_error(other)),
        }
    }
}

fn method(method: &Method) -> WasiMethod {
    match method {
        Method::Get => WasiMethod::Get,
        Method::Head => WasiMethod::Head,
        Method::Post => WasiMethod::Post,
        Method::Put => WasiMethod::Put,
        Method::Patch => WasiMethod::Patch,
        Method::Delete => WasiMethod::Delete,
    }
}

fn stream_error(error: StreamError) -> Error {
    match error {
        StreamError::Closed => failed("the connection closed"),
        StreamError::LastOperationFailed(io) => match wasip2::http::types::http_error_code(&io) {
            Some(code) => self::error(&code),
            None => Error::Failed {
                code: io
                    .to_debug_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
            },
        },
    }
}

fn failed(what: &str) -> Error {
    Error::Failed {
        code: what.to_owned(),
    }
}

/// The error of a code, named as the WIT's variant case in UpperCamelCase
/// (`HttpRequestDenied`), the name its `Debug` gives.
fn error(code: &ErrorCode) -> Error {
    let debug = format!("{code:?}");
    let name = debug.strip_prefix("ErrorCode::").unwrap_or(&debug);
    Error::of_code(name.split('(').next().unwrap_or(name).to_owned())
}
