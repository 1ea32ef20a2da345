//! ReadImage and AnnotateImage on real files: PNGs written by the `image` crate, a JPEG with an
//! EXIF orientation written by Pillow, a truncated file, and a decompression bomb, through the
//! registry with the reader child built beside the tests.

use crate::support;

use std::path::Path;

use image::{GenericImageView, GrayImage, Rgb, RgbImage};
use maestro_tools::attach::{ToolImage, collect};
use serde_json::json;
use support::*;

fn png(dir: &Path, rel: &str, width: u32, height: u32) -> RgbImage {
    let picture = RgbImage::from_fn(width, height, |x, y| {
        Rgb([(x * 255 / width) as u8, (y * 255 / height) as u8, 90])
    });
    picture.save(dir.join(rel)).unwrap();
    picture
}

async fn read_image(
    dir: &Path,
    max_side: u32,
    rel: &str,
) -> (maestro_tools::ToolOutput, Vec<ToolImage>) {
    let mut config = config();
    config.image_max_side = max_side;
    collect(call_with(
        config,
        &ctx(dir),
        "ReadImage",
        json!({"file_path": rel}),
    ))
    .await
}

#[tokio::test]
async fn read_image_shows_the_model_the_image_and_answers_its_metadata() {
    let dir = tempfile::tempdir().unwrap();
    png(dir.path(), "chart.png", 64, 48);
    let (out, images) = read_image(dir.path(), 1568, "chart.png").await;
    assert!(out.ok, "{}", out.output);
    assert!(
        out.output.starts_with("chart.png: PNG image, 64×48 px, "),
        "{}",
        out.output
    );
    assert_eq!(images.len(), 1);
    assert_eq!(
        (
            images[0].media_type.as_str(),
            images[0].width,
            images[0].height
        ),
        ("image/png", 64, 48)
    );
    let sent = image::load_from_memory(&images[0].data).unwrap();
    assert_eq!(sent.dimensions(), (64, 48));
    assert_eq!(
        sent.to_rgb8(),
        image::open(dir.path().join("chart.png")).unwrap().to_rgb8()
    );
}

#[tokio::test]
#[cfg_attr(
    no_pillow,
    ignore = "needs Pillow: python3 -m pip install pillow, or scripts/prerequisites.sh"
)]
async fn read_image_turns_an_exif_rotated_photo_upright_and_shrinks_it() {
    let dir = tempfile::tempdir().unwrap();
    // 400×200 as stored, left half red, right half blue; orientation 6: turn 90° clockwise to view
    let script = "import sys\nfrom PIL import Image\nim = Image.new('RGB', (400, 200), (0, 0, 255))\n\
        im.paste((255, 0, 0), (0, 0, 200, 200))\nexif = Image.Exif()\nexif[0x0112] = 6\n\
        im.save(sys.argv[1], 'JPEG', quality=95, exif=exif.tobytes())\n";
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(dir.path().join("photo.jpg"))
        .status()
        .unwrap();
    assert!(
        status.success(),
        "Pillow (installed by scripts/prerequisites.sh) wrote no JPEG"
    );
    let (out, images) = read_image(dir.path(), 100, "photo.jpg").await;
    assert!(out.ok, "{}", out.output);
    assert!(
        out.output.contains("JPEG image, 200×400 px"),
        "{}",
        out.output
    );
    assert!(
        out.output
            .contains("stored as 400×200 px with EXIF orientation Rotate90"),
        "{}",
        out.output
    );
    assert!(
        out.output.contains("Shown shrunk to 50×100 px"),
        "{}",
        out.output
    );
    let sent = image::load_from_memory(&images[0].data).unwrap().to_rgb8();
    assert_eq!(sent.dimensions(), (50, 100));
    assert_eq!(images[0].media_type, "image/jpeg");
    // upright, the stored left half is on top
    let top = sent.get_pixel(25, 10);
    let bottom = sent.get_pixel(25, 90);
    assert!(top[0] > 200 && top[2] < 60, "top {top:?}");
    assert!(bottom[2] > 200 && bottom[0] < 60, "bottom {bottom:?}");
}

#[tokio::test]
async fn corrupt_truncated_and_bomb_images_get_clear_errors_and_the_tools_go_on() {
    let dir = tempfile::tempdir().unwrap();
    png(dir.path(), "good.png", 300, 200);
    let whole = std::fs::read(dir.path().join("good.png")).unwrap();
    std::fs::write(dir.path().join("cut.png"), &whole[..whole.len() / 2]).unwrap();
    std::fs::write(
        dir.path().join("notes.png"),
        "these are notes, not pixels\n",
    )
    .unwrap();
    // 12,000 × 12,000 px of black: a few hundred KiB that would decode to 144 MB
    GrayImage::new(12_000, 12_000)
        .save(dir.path().join("bomb.png"))
        .unwrap();
    assert!(
        std::fs::metadata(dir.path().join("bomb.png"))
            .unwrap()
            .len()
            < 1_000_000
    );

    let (cut, _) = read_image(dir.path(), 1568, "cut.png").await;
    assert!(!cut.ok);
    assert!(
        cut.output
            .starts_with("ReadImage cannot use `cut.png`: the file is corrupt"),
        "{}",
        cut.output
    );
    let (notes, _) = read_image(dir.path(), 1568, "notes.png").await;
    assert!(!notes.ok);
    assert!(
        notes.output.contains(
            "the file is of the wrong type: this is not an image the tool reads (PNG or JPEG)"
        ),
        "{}",
        notes.output
    );
    let (bomb, images) = read_image(dir.path(), 1568, "bomb.png").await;
    assert!(!bomb.ok);
    assert!(images.is_empty());
    assert!(
        bomb.output.contains("the file is too large: the image claims 12000×12000 px (144 megapixels), more than the 64 megapixels"),
        "{}",
        bomb.output
    );
    let (good, images) = read_image(dir.path(), 1568, "good.png").await;
    assert!(good.ok, "{}", good.output);
    assert_eq!(images.len(), 1);
}

/// The pixels a shape may touch: its rectangle widened by the stroke and, for a label, the
/// label's line above it; a text's line.
fn region(shape: &serde_json::Value, stroke: i64, size: i64) -> (i64, i64, i64, i64) {
    let c: Vec<i64> = shape["coordinates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as i64)
        .collect();
    let pad = stroke + 1;
    if shape["kind"] == "text" {
        let chars = shape["label"].as_str().unwrap().chars().count() as i64;
        return (c[0] - 2, c[1] - 2, c[0] + chars * size + 2, c[1] + size * 2);
    }
    let (x1, x2) = (c[0].min(c[2]), c[0].max(c[2]));
    let (y1, y2) = (c[1].min(c[3]), c[1].max(c[3]));
    let head = if shape["kind"] == "arrow" {
        (stroke * 5).max(10) + 2
    } else {
        0
    };
    (
        x1 - pad - head,
        y1 - pad - head,
        x2 + pad + head,
        y2 + pad + head,
    )
}

#[tokio::test]
async fn annotate_image_changes_exactly_the_pixels_of_its_shapes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("output")).unwrap();
    let original = png(dir.path(), "scan.png", 800, 600);
    let shapes = json!([
        {"kind": "box", "coordinates": [50, 60, 250, 200], "color": "red"},
        {"kind": "ellipse", "coordinates": [400, 80, 700, 260], "color": "#00ff00"},
        {"kind": "arrow", "coordinates": [100, 500, 300, 350], "color": "blue"},
        {"kind": "text", "coordinates": [450, 450], "label": "Total", "color": "black"},
    ]);
    let mut ctx = ctx(dir.path());
    ctx.edit = true;
    let out = call_with(
        config(),
        &ctx,
        "AnnotateImage",
        json!({
        "file_path": "scan.png", "shapes": shapes, "output_path": "output/scan-marked.png"}),
    )
    .await;
    assert!(out.ok, "{}", out.output);
    assert!(
        out.output
            .starts_with("wrote `output/scan-marked.png`: image/png 800×600 px with 4 shape(s)"),
        "{}",
        out.output
    );
    assert_eq!(
        image::open(dir.path().join("scan.png")).unwrap().to_rgb8(),
        original,
        "the original is left alone"
    );
    let marked = image::open(dir.path().join("output/scan-marked.png"))
        .unwrap()
        .to_rgb8();
    assert_eq!(marked.dimensions(), (800, 600));
    let (stroke, size) = (2, 20); // 800 px: a 2 px stroke, 20 px letters
    let regions: Vec<_> = shapes
        .as_array()
        .unwrap()
        .iter()
        .map(|s| region(s, stroke, size))
        .collect();
    let inside =
        |x: i64, y: i64, r: &(i64, i64, i64, i64)| x >= r.0 && x <= r.2 && y >= r.1 && y <= r.3;
    let mut changed = vec![0usize; regions.len()];
    for (x, y, pixel) in marked.enumerate_pixels() {
        let (x, y) = (i64::from(x), i64::from(y));
        let same = pixel == original.get_pixel(x as u32, y as u32);
        let owners: Vec<usize> = (0..regions.len())
            .filter(|i| inside(x, y, &regions[*i]))
            .collect();
        if owners.is_empty() {
            assert!(same, "pixel ({x}, {y}) outside every shape changed");
        } else if !same {
            for i in owners {
                changed[i] += 1;
            }
        }
    }
    for (i, n) in changed.iter().enumerate() {
        assert!(*n > 50, "shape {i} changed only {n} pixels");
    }
    // the box's outline is red, its inside untouched
    assert_eq!(marked.get_pixel(150, 60), &Rgb([230, 25, 25]));
    assert_eq!(marked.get_pixel(150, 130), original.get_pixel(150, 130));
}

#[tokio::test]
async fn annotate_image_writes_only_with_edit_and_inside_a_writable_folder() {
    let dir = tempfile::tempdir().unwrap();
    png(dir.path(), "scan.png", 100, 100);
    let input = |output: &str| {
        json!({"file_path": "scan.png", "output_path": output,
        "shapes": [{"kind": "box", "coordinates": [1, 1, 50, 50]}]})
    };
    let read_only = call(dir.path(), "AnnotateImage", input("output/a.png")).await;
    assert!(!read_only.ok);
    assert!(
        read_only.output.starts_with(
            "`AnnotateImage` is not available in this movement (it cannot edit files)"
        ),
        "{}",
        read_only.output
    );
    let mut ctx = ctx(dir.path());
    ctx.edit = true;
    let outside = call_with(config(), &ctx, "AnnotateImage", input("scan-marked.png")).await;
    assert!(!outside.ok);
    assert!(!dir.path().join("scan-marked.png").exists());
    let bad = call_with(
        config(),
        &ctx,
        "AnnotateImage",
        json!({"file_path": "scan.png", "output_path": "output/b.png",
        "shapes": [{"kind": "text", "coordinates": [1, 2, 3, 4], "label": "x"}]}),
    )
    .await;
    assert!(!bad.ok);
    assert!(
        bad.output
            .contains("shapes[0] (Text) needs 2 coordinates ([x, y])"),
        "{}",
        bad.output
    );
}
