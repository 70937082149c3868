//! Splitting a streamed HTTP body into messages: server-sent events (OpenAI, llama.cpp,
//! Mistral) and newline-delimited JSON (Ollama).
//!
//! Network reads cut the body anywhere: in the middle of a line, of a UTF-8 character, or between
//! the `\r` and `\n` of a line break. The decoders here buffer bytes and only hand out complete
//! lines, so callers never see a partial message.

use futures::{Stream, StreamExt};
use tabby_inference::ModelError;

use crate::http::transport_error;

/// Splits bytes into lines ended by `\n`, `\r\n` or `\r`, across arbitrary chunk boundaries.
#[derive(Debug, Default)]
struct LineDecoder {
    buf: Vec<u8>,
    /// The previous chunk ended with `\r`: a leading `\n` in the next one belongs to it.
    after_cr: bool,
}

impl LineDecoder {
    fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        for &byte in bytes {
            let after_cr = std::mem::take(&mut self.after_cr);
            match byte {
                b'\n' if after_cr => {}
                b'\n' => lines.push(self.take_line()),
                b'\r' => {
                    lines.push(self.take_line());
                    self.after_cr = true;
                }
                _ => self.buf.push(byte),
            }
        }
        lines
    }

    /// The last line, if the body did not end with a line break.
    fn finish(&mut self) -> Option<String> {
        (!self.buf.is_empty()).then(|| self.take_line())
    }

    fn take_line(&mut self) -> String {
        let line = std::mem::take(&mut self.buf);
        String::from_utf8(line)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

/// Assembles SSE events from lines and returns their `data` payloads.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    lines: LineDecoder,
    data: Option<String>,
}

impl SseDecoder {
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let lines = self.lines.feed(bytes);
        lines
            .into_iter()
            .filter_map(|line| self.line(&line))
            .collect()
    }

    /// Flushes an event the server did not terminate with a blank line.
    pub(crate) fn finish(&mut self) -> Option<String> {
        if let Some(line) = self.lines.finish()
            && let Some(data) = self.line(&line)
        {
            return Some(data);
        }
        self.data.take()
    }

    fn line(&mut self, line: &str) -> Option<String> {
        if line.is_empty() {
            return self.data.take();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        if field == "data" {
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            }
        }
        // `event`, `id` and `retry` carry nothing the backends need.
        None
    }
}

/// The `data` payloads of an SSE response body, in order.
pub(crate) fn sse_data(
    response: reqwest::Response,
    url: String,
) -> impl Stream<Item = Result<String, ModelError>> + Send + 'static {
    let mut body = response.bytes_stream();
    async_stream::stream! {
        let mut decoder = SseDecoder::default();
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(bytes) => {
                    for data in decoder.feed(&bytes) {
                        yield Ok(data);
                    }
                }
                Err(e) => {
                    yield Err(transport_error(&e, &url));
                    return;
                }
            }
        }
        if let Some(data) = decoder.finish() {
            yield Ok(data);
        }
    }
}

/// The non-empty lines of a newline-delimited JSON response body, in order.
pub(crate) fn ndjson_lines(
    response: reqwest::Response,
    url: String,
) -> impl Stream<Item = Result<String, ModelError>> + Send + 'static {
    let mut body = response.bytes_stream();
    async_stream::stream! {
        let mut decoder = LineDecoder::default();
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(bytes) => {
                    for line in decoder.feed(&bytes) {
                        if !line.trim().is_empty() {
                            yield Ok(line);
                        }
                    }
                }
                Err(e) => {
                    yield Err(transport_error(&e, &url));
                    return;
                }
            }
        }
        if let Some(line) = decoder.finish().filter(|l| !l.trim().is_empty()) {
            yield Ok(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `body` cut at every possible position into two chunks; all cuts must agree.
    fn decode_every_split(body: &str) -> Vec<String> {
        let bytes = body.as_bytes();
        let mut whole = SseDecoder::default();
        let mut expected = whole.feed(bytes);
        expected.extend(whole.finish());
        for cut in 0..=bytes.len() {
            let mut decoder = SseDecoder::default();
            let mut got = decoder.feed(&bytes[..cut]);
            got.extend(decoder.feed(&bytes[cut..]));
            got.extend(decoder.finish());
            assert_eq!(got, expected, "cut at byte {cut}");
        }
        expected
    }

    #[test]
    fn events_survive_any_chunk_boundary() {
        let body = "data: {\"a\":\"é\"}\n\ndata: [DONE]\n\n";
        assert_eq!(decode_every_split(body), vec!["{\"a\":\"é\"}", "[DONE]"]);
    }

    #[test]
    fn crlf_and_cr_line_endings_are_accepted() {
        assert_eq!(
            decode_every_split("data: 1\r\n\r\ndata: 2\r\rdata:3\n\n"),
            vec!["1", "2", "3"]
        );
    }

    #[test]
    fn comments_and_other_fields_are_skipped() {
        let body = ": keep-alive\n\nevent: message\nid: 7\ndata: x\n\n:ping\n\n";
        assert_eq!(decode_every_split(body), vec!["x"]);
    }

    #[test]
    fn multi_line_data_is_joined_and_unterminated_event_is_flushed() {
        assert_eq!(
            decode_every_split("data: a\ndata: b\n\ndata: tail"),
            vec!["a\nb", "tail"]
        );
    }

    #[test]
    fn ndjson_lines_split_across_chunks() {
        let mut decoder = LineDecoder::default();
        let mut lines = decoder.feed(b"{\"a\":1}\n{\"b\"");
        lines.extend(decoder.feed(b":2}\n{\"c\":3}"));
        lines.extend(decoder.finish());
        assert_eq!(lines, vec!["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]);
    }
}
