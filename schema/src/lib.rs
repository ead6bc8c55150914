//! The vocabulary of sessionlog: session ids, the header, event records, the
//! closed vocabularies, the typed events of format v1 (and the `seal` of
//! v1.1, with its hash chain and keys), and the record codec.
//!
//! Nothing here performs I/O. This crate is the only one that knows the byte
//! layout of a record (`record`) and how a sequence of lines splits into a good
//! prefix, a torn tail or corruption (`scan`).
#![deny(missing_docs)]

mod build;
mod compact;
mod event;
mod forms;
mod id;
mod record;
mod scan;
mod seal;
mod view;
mod view_scanner;
mod vocab;

pub use build::EventData;
pub use event::{
    event_type_error, is_unprintable, one_line, serde_message, ApprovalAsked, ApprovalDecided,
    ApprovalPolicyChange, AttachmentPart, Checkpoint, ChildCreated, ContentPart, Event, EventType,
    ImagePart, Message, MessageSource, PresetChange, RequestHeader, SandboxModeChange, ShapeError,
    StepEnd, StepStart, TextPart, ToolDefinition, ToolError, ToolSettle, ToolStart, TurnEnd,
    TurnStart,
};
pub use id::{InvalidSessionId, SessionId, MAX_SESSION_ID_LEN};
pub use record::{
    check_crc, checked_body_fields, compact_json, decode_checked_body, decode_event,
    decode_event_unproven, decode_event_unproven_into, decode_event_viewed, decode_header,
    decode_header_body, encode_line, encode_line_into, encode_signed_line_into, line_break_at,
    prove_data, prove_json, record_crc, split_crc, BodyFields, BodyRoom, DecodeError,
    DecodedHeader, EventRecord, HeaderVocabularyError, Resign, SessionHeader, ViewedEvent,
    CRC_SUFFIX_LEN, FORMAT_VERSION, MAX_RECORD_BYTES,
};
pub use scan::{Corruption, LogScanner, Position, ScanSummary, TornTail, MAX_BATCH_RECORDS};
pub use seal::{
    parse_trust_file, seal_message, ChainValue, KeyTextError, Seal, SealPublicKey, SealSecretKey,
    SealSignature, CHAIN_DOMAIN, CHAIN_PREFIX, PUBLIC_KEY_PREFIX, SEAL_MESSAGE_DOMAIN,
    SECRET_KEY_PREFIX,
};
pub use view::EventView;
pub use vocab::{
    ApprovalOutcome, ApprovalPolicy, ChildMode, MessageRole, Preset, SandboxMode, SettleStatus,
};
