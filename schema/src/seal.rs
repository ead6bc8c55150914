//! Seals: the hash chain over record bodies, the `seal` event's data, the
//! Ed25519 keys that sign seals and the exact bytes they sign.
//!
//! The chain commits to every record of a session through its body (the
//! bytes before `,"crc":`, identical in every backend):
//! `c0 = SHA-256("sessionlog-chain-v1" ‖ 0x00 ‖ header body)` and
//! `ck = SHA-256(0x01 ‖ c(k-1) ‖ body of event k)`. A seal at seq s carries
//! `c(s-1)` and, when signed, a key and an Ed25519 signature over
//! [`seal_message`]. Everything here is computation on bytes; reading key
//! files is the command line's business.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde::de;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use crate::SessionId;

/// The domain string that opens the chain's first hash.
pub const CHAIN_DOMAIN: &str = "sessionlog-chain-v1";

/// The first line of every signed seal message.
pub const SEAL_MESSAGE_DOMAIN: &str = "sessionlog-seal-v1";

/// The prefix of a written chain value.
pub const CHAIN_PREFIX: &str = "sha256:";

/// The prefix of a written public key.
pub const PUBLIC_KEY_PREFIX: &str = "ed25519:";

/// The prefix of the line a secret key file holds.
pub const SECRET_KEY_PREFIX: &str = "ed25519-secret:";

/// One value of a session's hash chain: `c(k)` commits to the header and
/// events 1..=k. Written `sha256:` + 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChainValue([u8; 32]);

/// An Ed25519 public key, as a seal names it (`ed25519:` + base64 of its 32
/// bytes). Holding one says nothing of whether the bytes are a point of the
/// curve: [`SealSignature::verify`] finds that out.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SealPublicKey([u8; 32]);

/// A key that signs seals. Its secret never appears in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct SealSecretKey(SigningKey);

/// The `key` and `sig` members of a signed seal, which come together.
#[derive(Clone, PartialEq, Eq)]
pub struct SealSignature {
    /// The key that signed.
    pub key: SealPublicKey,
    /// The 64-byte Ed25519 signature of [`seal_message`].
    pub sig: [u8; 64],
}

/// The `data` of a `seal` event: `{throughSeq, chain, key?, sig?}`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SealWire")]
pub struct Seal {
    /// The last seq the seal covers: the seal's own seq − 1.
    pub through_seq: u64,
    /// The chain value at `through_seq`.
    pub chain: ChainValue,
    /// The key and signature, when the seal is signed.
    pub signature: Option<SealSignature>,
}

/// A key file or trust file line that is not what it should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct KeyTextError {
    /// The 1-based line.
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

impl ChainValue {
    /// `c0`: the chain value of a session holding only its header, whose
    /// stored body is `header_body`.
    pub fn genesis(header_body: &str) -> ChainValue {
        let mut hasher = Sha256::new();
        hasher.update(CHAIN_DOMAIN.as_bytes());
        hasher.update([0u8]);
        hasher.update(header_body.as_bytes());
        ChainValue(hasher.finalize().into())
    }

    /// `ck` from `c(k-1)` (self) and the body of event k.
    pub fn next(&self, event_body: &str) -> ChainValue {
        let mut hasher = Sha256::new();
        hasher.update([1u8]);
        hasher.update(self.0);
        hasher.update(event_body.as_bytes());
        ChainValue(hasher.finalize().into())
    }

    /// The value's 32 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The value whose raw bytes are `bytes` (what
    /// [`as_bytes`](Self::as_bytes) gave).
    pub fn from_bytes(bytes: [u8; 32]) -> ChainValue {
        ChainValue(bytes)
    }

    /// Reads `sha256:` + 64 lowercase hex digits.
    pub fn parse(text: &str) -> Result<ChainValue, String> {
        let Some(hex) = text.strip_prefix(CHAIN_PREFIX) else {
            return Err(format!("{text:?} does not start with {CHAIN_PREFIX:?}"));
        };
        if hex.len() != 64 {
            return Err(format!(
                "{text:?} has {} hex digits after {CHAIN_PREFIX:?}, expected 64",
                hex.len()
            ));
        }
        let mut bytes = [0u8; 32];
        for (index, pair) in hex.as_bytes().chunks_exact(2).enumerate() {
            let (Some(high), Some(low)) = (lower_hex_digit(pair[0]), lower_hex_digit(pair[1]))
            else {
                return Err(format!(
                    "{text:?} holds a character that is not a lowercase hex digit"
                ));
            };
            bytes[index] = high << 4 | low;
        }
        Ok(ChainValue(bytes))
    }
}

impl SealPublicKey {
    /// Reads `ed25519:` + standard base64 (with padding) of 32 bytes.
    pub fn parse(text: &str) -> Result<SealPublicKey, String> {
        let Some(encoded) = text.strip_prefix(PUBLIC_KEY_PREFIX) else {
            return Err(format!(
                "{text:?} does not start with {PUBLIC_KEY_PREFIX:?}"
            ));
        };
        decode_exact::<32>(encoded, "public key").map(SealPublicKey)
    }

    /// The key's 32 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl SealSecretKey {
    /// The key whose 32-byte Ed25519 seed is `seed`.
    pub fn from_seed(seed: [u8; 32]) -> SealSecretKey {
        SealSecretKey(SigningKey::from_bytes(&seed))
    }

    /// Reads a secret key file's text: one line `ed25519-secret:` + base64
    /// of the 32-byte seed, with or without a final newline.
    pub fn parse_file(text: &str) -> Result<SealSecretKey, KeyTextError> {
        let line = text.strip_suffix('\n').unwrap_or(text);
        let refuse = |message: String| KeyTextError { line: 1, message };
        if let Some((_, after)) = line.split_once('\n') {
            // What is wrong is the line after the key, however many follow.
            let what = match after.trim().is_empty() {
                true => "an empty line",
                false => "more text",
            };
            return Err(KeyTextError {
                line: 2,
                message: format!("{what} after the key; a secret key file holds exactly one line"),
            });
        }
        let Some(encoded) = line.strip_prefix(SECRET_KEY_PREFIX) else {
            return Err(refuse(format!(
                "expected {SECRET_KEY_PREFIX:?} followed by base64; is this a public key or another file?"
            )));
        };
        // The message never quotes the text: a secret one character off is
        // still nearly all of the secret.
        decode_secret_seed(encoded)
            .map(SealSecretKey::from_seed)
            .map_err(refuse)
    }

    /// The text of its secret key file: `ed25519-secret:` + base64(seed)
    /// and a newline.
    pub fn to_file_text(&self) -> String {
        format!("{SECRET_KEY_PREFIX}{}\n", BASE64.encode(self.0.to_bytes()))
    }

    /// Its public key.
    pub fn public_key(&self) -> SealPublicKey {
        SealPublicKey(self.0.verifying_key().to_bytes())
    }

    /// Signs the seal of session `id` through `through_seq` at `chain`.
    pub fn sign(&self, id: &SessionId, through_seq: u64, chain: &ChainValue) -> SealSignature {
        let message = seal_message(id, through_seq, chain);
        SealSignature {
            key: self.public_key(),
            sig: self.0.sign(message.as_bytes()).to_bytes(),
        }
    }
}

impl SealSignature {
    /// Checks the signature against its key over `message`, strictly:
    /// ed25519-dalek's `verify_strict`, which also refuses a key of small
    /// order and a non-canonical signature (which no RFC 8032 signer
    /// produces).
    pub fn verify(&self, message: &[u8]) -> Result<(), String> {
        let key = VerifyingKey::from_bytes(&self.key.0)
            .map_err(|_| format!("{} is not a valid Ed25519 public key", self.key))?;
        let signature = ed25519_dalek::Signature::from_bytes(&self.sig);
        key.verify_strict(message, &signature)
            .map_err(|_| format!("the signature does not verify against {}", self.key))
    }
}

impl Seal {
    /// An unsigned seal of `chain` through `through_seq`.
    pub fn unsigned(through_seq: u64, chain: ChainValue) -> Seal {
        Seal {
            through_seq,
            chain,
            signature: None,
        }
    }

    /// A seal of session `id` through `through_seq` at `chain`, signed by
    /// `key` when one is given.
    pub fn new(
        id: &SessionId,
        through_seq: u64,
        chain: ChainValue,
        key: Option<&SealSecretKey>,
    ) -> Seal {
        Seal {
            through_seq,
            chain,
            signature: key.map(|key| key.sign(id, through_seq, &chain)),
        }
    }

    /// The event's `data` as writers emit it: compact, members in the
    /// order `throughSeq`, `chain`, `key`, `sig`.
    pub fn to_data_json(&self) -> String {
        let mut text = format!(
            "{{\"throughSeq\":{},\"chain\":\"{}\"",
            self.through_seq, self.chain
        );
        if let Some(signature) = &self.signature {
            text.push_str(&format!(
                ",\"key\":\"{}\",\"sig\":\"{}\"",
                signature.key,
                BASE64.encode(signature.sig)
            ));
        }
        text.push('}');
        text
    }
}

/// The exact text a seal's signature covers:
/// `"sessionlog-seal-v1\n" + id + "\n" + throughSeq + "\n" + chain + "\n"`.
pub fn seal_message(id: &SessionId, through_seq: u64, chain: &ChainValue) -> String {
    format!(
        "{SEAL_MESSAGE_DOMAIN}\n{}\n{through_seq}\n{chain}\n",
        id.as_str()
    )
}

/// Reads a trust file's text: one public key (`ed25519:` + base64) a line.
/// Blank lines and lines starting with `#` are skipped; surrounding spaces
/// and a `\r` are trimmed.
pub fn parse_trust_file(text: &str) -> Result<Vec<SealPublicKey>, KeyTextError> {
    let mut keys = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let refuse = |message: String| KeyTextError {
            line: index + 1,
            message,
        };
        // A line that is no public key is never quoted: the file named may
        // be a secret key (this one's, or an SSH key) given by mistake.
        if line.starts_with(SECRET_KEY_PREFIX) {
            return Err(refuse(format!(
                "this is a secret key ({SECRET_KEY_PREFIX}…, not shown): a trust file lists \
                 public keys, such as the FILE.pub that keygen writes beside it"
            )));
        }
        if !line.starts_with(PUBLIC_KEY_PREFIX) {
            return Err(refuse(format!(
                "not a public key (not shown): each line is {PUBLIC_KEY_PREFIX:?} followed by \
                 base64, a comment (#) or empty"
            )));
        }
        let key = SealPublicKey::parse(line).map_err(refuse)?;
        keys.push(key);
    }
    Ok(keys)
}

impl fmt::Display for ChainValue {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(CHAIN_PREFIX)?;
        for byte in self.0 {
            write!(formatter, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ChainValue {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, formatter)
    }
}

impl fmt::Display for SealPublicKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{PUBLIC_KEY_PREFIX}{}", BASE64.encode(self.0))
    }
}

impl fmt::Debug for SealPublicKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, formatter)
    }
}

impl fmt::Debug for SealSecretKey {
    /// Names the public key only: the secret is never printed.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "SealSecretKey({})", self.public_key())
    }
}

impl fmt::Debug for SealSignature {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} sig {}", self.key, BASE64.encode(self.sig))
    }
}

impl fmt::Debug for Seal {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Seal")
            .field("through_seq", &self.through_seq)
            .field("chain", &self.chain)
            .field("signature", &self.signature)
            .finish()
    }
}

impl<'de> Deserialize<'de> for ChainValue {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        ChainValue::parse(&text).map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for SealPublicKey {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        SealPublicKey::parse(&text).map_err(de::Error::custom)
    }
}

/// The 64 bytes of a `sig` member.
struct SignatureBytes([u8; 64]);

impl<'de> Deserialize<'de> for SignatureBytes {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        decode_exact::<64>(&text, "signature")
            .map(SignatureBytes)
            .map_err(de::Error::custom)
    }
}

/// The members of a seal as they are read, before `key` and `sig` are
/// paired. A seal has exactly these members.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SealWire {
    through_seq: u64,
    chain: ChainValue,
    #[serde(default, deserialize_with = "crate::event::present")]
    key: Option<SealPublicKey>,
    #[serde(default, deserialize_with = "crate::event::present")]
    sig: Option<SignatureBytes>,
}

impl TryFrom<SealWire> for Seal {
    type Error = String;

    fn try_from(wire: SealWire) -> Result<Seal, String> {
        let signature = match (wire.key, wire.sig) {
            (Some(key), Some(sig)) => Some(SealSignature { key, sig: sig.0 }),
            (None, None) => None,
            (Some(_), None) => return Err("key without sig: they come together".to_owned()),
            (None, Some(_)) => return Err("sig without key: they come together".to_owned()),
        };
        Ok(Seal {
            through_seq: wire.through_seq,
            chain: wire.chain,
            signature,
        })
    }
}

/// Decodes standard base64 with padding into exactly `N` bytes.
fn decode_exact<const N: usize>(encoded: &str, what: &str) -> Result<[u8; N], String> {
    let bytes = BASE64.decode(encoded).map_err(|error| {
        format!("{what} {encoded:?} is not standard base64 with padding: {error}")
    })?;
    <[u8; N]>::try_from(bytes.as_slice()).map_err(|_| {
        format!(
            "{what} {encoded:?} decodes to {} bytes, expected {N}",
            bytes.len()
        )
    })
}

/// The 32-byte seed of a secret key file, refused without quoting it:
/// the decoder's own message names the character it stopped at, which in
/// a damaged file is one bit from the secret's, so only where is said.
fn decode_secret_seed(encoded: &str) -> Result<[u8; 32], String> {
    let bytes = BASE64.decode(encoded).map_err(|error| {
        let what = match error {
            base64::DecodeError::InvalidByte(offset, _) => {
                format!("a character that is not base64 at offset {offset}")
            }
            base64::DecodeError::InvalidLastSymbol(offset, _) => {
                format!("a last character at offset {offset} that leaves bits over")
            }
            base64::DecodeError::InvalidLength(length) => {
                format!("{length} characters, not a length base64 has")
            }
            base64::DecodeError::InvalidPadding => "padding out of place".to_owned(),
        };
        format!("the secret key seed is not standard base64 with padding: {what}")
    })?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
        format!(
            "the secret key seed decodes to {} bytes, expected 32",
            bytes.len()
        )
    })
}

fn lower_hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> SessionId {
        SessionId::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_chain_follows_its_definition_byte_for_byte() {
        let header = r#"{"kind":"header","id":"s""#;
        let mut first = Sha256::new();
        first.update(b"sessionlog-chain-v1\x00");
        first.update(header.as_bytes());
        let c0: [u8; 32] = first.finalize().into();
        assert_eq!(ChainValue::genesis(header).as_bytes(), &c0);
        let mut second = Sha256::new();
        second.update([1u8]);
        second.update(c0);
        second.update(b"{\"seq\":1");
        let c1: [u8; 32] = second.finalize().into();
        assert_eq!(
            ChainValue::genesis(header).next("{\"seq\":1").as_bytes(),
            &c1
        );
    }

    #[test]
    fn a_chain_value_reads_back_what_it_writes_and_nothing_looser() {
        let value = ChainValue::genesis("x");
        let text = value.to_string();
        assert_eq!(text.len(), 7 + 64);
        assert_eq!(ChainValue::parse(&text), Ok(value));
        assert!(ChainValue::parse(&text.to_uppercase()).is_err());
        assert!(ChainValue::parse(&text.replace("sha256:", "sha512:")).is_err());
        assert!(ChainValue::parse(&text[..text.len() - 1]).is_err());
        assert!(ChainValue::parse(&format!("{text}0")).is_err());
        let upper_digit = format!("{}A", &text[..text.len() - 1]);
        assert!(ChainValue::parse(&upper_digit).is_err());
    }

    #[test]
    fn a_signed_seal_verifies_and_a_changed_message_does_not() {
        let key = SealSecretKey::from_seed([7; 32]);
        let chain = ChainValue::genesis("h");
        let seal = Seal::new(&id("s"), 0, chain, Some(&key));
        let Some(signature) = &seal.signature else {
            panic!("a seal made with a key is signed");
        };
        assert_eq!(signature.key, key.public_key());
        assert_eq!(
            signature.verify(seal_message(&id("s"), 0, &chain).as_bytes()),
            Ok(())
        );
        assert!(signature
            .verify(seal_message(&id("t"), 0, &chain).as_bytes())
            .is_err());
        assert!(signature
            .verify(seal_message(&id("s"), 1, &chain).as_bytes())
            .is_err());
    }

    #[test]
    fn the_message_is_the_specified_text() {
        let chain = ChainValue([0xab; 32]);
        assert_eq!(
            seal_message(&id("s-1"), 41, &chain),
            format!("sessionlog-seal-v1\ns-1\n41\nsha256:{}\n", "ab".repeat(32))
        );
    }

    #[test]
    fn seal_data_reads_back_as_written() {
        let key = SealSecretKey::from_seed([9; 32]);
        for seal in [
            Seal::new(&id("s"), 3, ChainValue([1; 32]), Some(&key)),
            Seal::unsigned(3, ChainValue([1; 32])),
        ] {
            let data = seal.to_data_json();
            let read: Seal = serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(read, seal);
        }
    }

    #[test]
    fn key_files_read_back_and_name_what_is_wrong() {
        let key = SealSecretKey::from_seed([3; 32]);
        let text = key.to_file_text();
        let read = SealSecretKey::parse_file(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read.public_key(), key.public_key());
        assert!(!format!("{key:?}").contains(&text[SECRET_KEY_PREFIX.len()..text.len() - 1]));
        let public = key.public_key().to_string();
        assert!(SealSecretKey::parse_file(&public).is_err());
        let trust = format!("# auditors\n\n{public}\r\n  {public}  \n");
        assert_eq!(
            parse_trust_file(&trust),
            Ok(vec![key.public_key(), key.public_key()])
        );
        let error = parse_trust_file(&format!("{public}\nnot a key\n"));
        assert!(matches!(error, Err(KeyTextError { line: 2, .. })));
    }

    /// A secret key file (or any file that is no trust file) given as a
    /// trust file is refused without quoting a line of it.
    #[test]
    fn a_secret_key_given_as_a_trust_file_is_refused_without_quoting_it() {
        let text = SealSecretKey::from_seed([7; 32]).to_file_text();
        let seed = &text[SECRET_KEY_PREFIX.len()..text.len() - 1];
        let Err(error) = parse_trust_file(&text) else {
            panic!("a secret key read as a trust file");
        };
        assert_eq!(error.line, 1);
        assert!(error.message.contains("secret key"), "{error}");
        assert!(!error.to_string().contains(seed), "{error}");
        let ssh = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n";
        let Err(error) = parse_trust_file(ssh) else {
            panic!("an SSH key read as a trust file");
        };
        assert!(!error.to_string().contains("b3BlbnNz"), "{error}");
        assert!(!error.to_string().contains("OPENSSH"), "{error}");
    }

    #[test]
    fn a_damaged_secret_key_file_is_refused_without_quoting_the_secret() {
        let text = SealSecretKey::from_seed([5; 32]).to_file_text();
        let seed = &text[SECRET_KEY_PREFIX.len()..text.len() - 1];
        // One character short, one replaced by a non-base64 one, and the
        // last before the padding one bit off (its low bits then left
        // over), which the decoder's own message quotes as a number.
        let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let last = seed.len() - 2;
        let Some(at) = alphabet.find(&seed[last..=last]) else {
            panic!("{seed} ends in {:?}", &seed[last..]);
        };
        let off_by_a_bit = alphabet.as_bytes()[at ^ 1];
        for damaged in [
            format!("{SECRET_KEY_PREFIX}{}\n", &seed[1..]),
            format!("{SECRET_KEY_PREFIX}{}*\n", &seed[..seed.len() - 1]),
            format!(
                "{SECRET_KEY_PREFIX}{}{}=\n",
                &seed[..last],
                char::from(off_by_a_bit)
            ),
        ] {
            let error = SealSecretKey::parse_file(&damaged)
                .err()
                .unwrap_or_else(|| panic!("{damaged} was read"));
            let message = error.to_string();
            assert!(message.contains("secret key seed"), "{message}");
            assert!(!message.contains(&seed[1..20]), "{message}");
            assert!(
                !message.contains(&off_by_a_bit.to_string()),
                "{message} names the character"
            );
        }
    }
}
