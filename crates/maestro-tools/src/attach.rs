//! Images a tool shows the model with its result (ReadImage), handed to the engine beside the
//! [`ToolOutput`](crate::ToolOutput) rather than inside it.
//!
//! The engine runs a tool call inside [`collect`]; a tool calls [`attach_image`] while it runs.
//! Outside [`collect`] (a tool run by hand, `maestro tools call`) nothing collects the image and
//! [`attach_image`] says so, so the tool can tell the person instead.

use std::cell::RefCell;
use std::future::Future;

/// One image a tool result shows the model: the encoded bytes and what they are.
#[derive(Clone, PartialEq, Eq)]
pub struct ToolImage {
    /// The media type of `data`, e.g. `image/png`.
    pub media_type: String,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The encoded image.
    pub data: Vec<u8>,
}

impl std::fmt::Debug for ToolImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolImage")
            .field("media_type", &self.media_type)
            .field("width", &self.width)
            .field("height", &self.height)
            .field("bytes", &self.data.len())
            .finish()
    }
}

tokio::task_local! {
    static ATTACHED: RefCell<Vec<ToolImage>>;
}

/// Runs `call` (one tool call) and returns its output with the images it attached, in order.
pub async fn collect<T>(call: impl Future<Output = T>) -> (T, Vec<ToolImage>) {
    ATTACHED
        .scope(RefCell::new(Vec::new()), async move {
            let output = call.await;
            let images = ATTACHED
                .try_with(|attached| std::mem::take(&mut *attached.borrow_mut()))
                .unwrap_or_default();
            (output, images)
        })
        .await
}

/// Attaches `image` to the tool call being run. Returns false when nothing collects images (the
/// tool was not called by a run's model), so that the caller can say the image is not shown.
pub fn attach_image(image: ToolImage) -> bool {
    ATTACHED
        .try_with(|attached| attached.borrow_mut().push(image))
        .is_ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn image(width: u32) -> ToolImage {
        ToolImage {
            media_type: "image/png".into(),
            width,
            height: 1,
            data: vec![1, 2, 3],
        }
    }

    #[tokio::test]
    async fn images_attached_during_a_call_are_collected_in_order_and_nowhere_else() {
        assert!(!attach_image(image(1)));
        let (answer, images) = collect(async {
            assert!(attach_image(image(2)));
            tokio::task::yield_now().await;
            assert!(attach_image(image(3)));
            "done"
        })
        .await;
        assert_eq!(answer, "done");
        assert_eq!(images, vec![image(2), image(3)]);
        let ((), none) = collect(async {}).await;
        assert!(none.is_empty());
    }
}
