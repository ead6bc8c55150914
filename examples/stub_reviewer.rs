//! A stand-in reviewer model, to try `sessionlog review` and `review-audit`
//! without one: an OpenAI-compatible `POST …/chat/completions` endpoint on
//! a loopback port that answers every call with one fixed decision.
//!
//! ```text
//! cargo run -p sessionlog --example stub_reviewer -- 127.0.0.1:8080 allow
//! cargo run -p sessionlog --example stub_reviewer -- 127.0.0.1:8080 deny
//! ```
//!
//! It prints the pending action of each call it is asked about. A real
//! model (llama.cpp's `llama-server`, vLLM, DeepSeek, OpenAI) takes its
//! place at the same URL.

// An example program of its own, not the command line: it prints its
// own text, and `tools/clippy.toml`'s printing rule is for `sessionlog`.
#![allow(clippy::disallowed_macros)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let address = args.next().unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let content = match args.next().as_deref() {
        None | Some("allow") => r#"{"risk":"low","decision":"allow"}"#,
        Some("deny") => {
            r#"{"risk":"high","decision":"deny","reason":"The stub reviewer denies every call."}"#
        }
        Some(other) => return Err(format!("say allow or deny, not {other:?}").into()),
    };
    let answer = serde_json::json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]
    })
    .to_string();
    let listener = TcpListener::bind(&address)?;
    eprintln!("stub reviewer on http://{address}/v1, answering {content}");
    for stream in listener.incoming() {
        if let Err(error) = answer_one(stream?, &answer) {
            eprintln!("stub reviewer: {error}");
        }
    }
    Ok(())
}

/// Reads one request and answers it with `answer`.
fn answer_one(stream: TcpStream, answer: &str) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let asked: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let partitions: serde_json::Value = asked["messages"][1]["content"]
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    eprintln!("asked about {}", partitions["PENDING_ACTION"]);
    let mut stream = reader.into_inner();
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    )
}
