//! Images in a conversation: the part a user message carries, how much of the context it takes,
//! and the text a model that cannot see images reads instead.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Message;

/// One image shown to the model with a user message.
///
/// The bytes travel to the endpoint as a `data:` URL (OpenAI `image_url`, Anthropic `image`
/// with a base64 source) but are never serialised with the message: a transcript or a record
/// names the image by its SHA-256 hash, and whoever keeps the record keeps the bytes once
/// beside it under that hash.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ImagePart {
    /// The image's media type, e.g. `image/png` or `image/jpeg`.
    pub media_type: String,
    /// Width in pixels, as sent.
    pub width: u32,
    /// Height in pixels, as sent.
    pub height: u32,
    /// The SHA-256 of `data`, in lowercase hex.
    pub sha256: String,
    /// The encoded image (PNG, JPEG, …); not serialised.
    #[serde(skip)]
    pub data: bytes::Bytes,
}

impl std::fmt::Debug for ImagePart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImagePart")
            .field("media_type", &self.media_type)
            .field("width", &self.width)
            .field("height", &self.height)
            .field("sha256", &self.sha256)
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl ImagePart {
    /// An image part for `data`, an encoded image of `width` × `height` pixels; its hash is
    /// computed here.
    pub fn new(
        media_type: impl Into<String>,
        width: u32,
        height: u32,
        data: impl Into<bytes::Bytes>,
    ) -> ImagePart {
        let data = data.into();
        ImagePart {
            media_type: media_type.into(),
            width,
            height,
            sha256: sha256_hex(&data),
            data,
        }
    }

    /// `data:<media type>;base64,<bytes>`, as an endpoint takes it.
    pub fn data_url(&self) -> String {
        format!(
            "data:{};base64,{}",
            self.media_type,
            base64::engine::general_purpose::STANDARD.encode(&self.data)
        )
    }

    /// The text a model that cannot see images reads in the image's place: its size, format
    /// and hash, and a note saying the model cannot see it.
    pub fn description(&self) -> String {
        format!(
            "[image not shown: {}×{} px, {}, {} bytes, sha256 {}; this model cannot see \
             images, so work from the text about it; a vision model is needed to look at it \
             (llm.models.<name>.vision)]",
            self.width,
            self.height,
            self.media_type,
            self.data.len(),
            short_hash(&self.sha256)
        )
    }
}

/// The SHA-256 of `bytes` in lowercase hex.
fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn short_hash(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// The tokens an image of `width` × `height` pixels is counted as in the context estimate:
/// one token per 750 pixels (the rule Anthropic publishes for its models; OpenAI's tile rule
/// gives about the same for images of up to 1,568 px), at least 85 (OpenAI's base cost).
pub fn estimated_image_tokens(width: u32, height: u32) -> u64 {
    (u64::from(width) * u64::from(height)).div_ceil(750).max(85)
}

/// `messages` with every image replaced by its [`ImagePart::description`] appended to its
/// message's text: what a text-only model is sent.
pub fn describe_images(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .map(|message| match message {
            Message::User { content, images } if !images.is_empty() => {
                let mut text = content.clone();
                for image in images {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&image.description());
                }
                Message::user(text)
            }
            other => other.clone(),
        })
        .collect()
}

/// True when some message of `messages` carries an image.
pub(crate) fn has_images(messages: &[Message]) -> bool {
    messages
        .iter()
        .any(|m| matches!(m, Message::User { images, .. } if !images.is_empty()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_named_by_its_hash_and_never_serialises_its_bytes() {
        let part = ImagePart::new("image/png", 2, 3, b"not really a png".to_vec());
        assert_eq!(part.sha256, sha256_hex(b"not really a png"));
        assert_eq!(
            part.data_url(),
            "data:image/png;base64,bm90IHJlYWxseSBhIHBuZw=="
        );
        let json = serde_json::to_string(&Message::User {
            content: "look".into(),
            images: vec![part.clone()],
        })
        .unwrap();
        assert!(!json.contains("base64"), "{json}");
        assert!(json.contains(&part.sha256), "{json}");
        let text = serde_json::to_string(&Message::user("plain")).unwrap();
        assert_eq!(text, r#"{"role":"user","content":"plain"}"#);
    }

    #[test]
    fn a_text_only_model_reads_size_format_and_a_note() {
        let part = ImagePart::new("image/jpeg", 640, 480, vec![0u8; 10]);
        let described = describe_images(&[Message::User {
            content: "What is in it?".into(),
            images: vec![part],
        }]);
        let Message::User { content, images } = &described[0] else {
            panic!("{described:?}");
        };
        assert!(images.is_empty());
        assert!(
            content
                .starts_with("What is in it?\n[image not shown: 640×480 px, image/jpeg, 10 bytes"),
            "{content}"
        );
        assert!(content.contains("cannot see images"), "{content}");
        assert_eq!(estimated_image_tokens(1568, 1176), 2459);
        assert_eq!(estimated_image_tokens(10, 10), 85);
    }
}
