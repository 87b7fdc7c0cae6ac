//! The timeline as people see it: the SVG rendered by librsvg (`rsvg-convert`) and the HTML
//! page by headless Chromium, each to a PNG that must show the timeline's colours.
//!
//! Both come from Debian's packages librsvg2-bin and chromium, which
//! `scripts/install-packages chromium librsvg2-bin` installs (scripts/test does); the tests do
//! not install or download anything.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use rota_core::NodeName;
use rota_timeline::{Marker, MarkerKind, Millis, Segment, SegmentKind, Timeline};

/// 2026-11-29T10:00:00Z.
const T0: Millis = 1_795_946_400_000;
const MIN: Millis = 60_000;

fn timeline() -> Timeline {
    use SegmentKind::{Drain, Maintenance, Reboot, Verify, Wait, Window};
    let node = |name: &str| NodeName::new(name).unwrap();
    let segment = |name: &str, kind, start: Millis, end: Millis| {
        Segment::new(node(name), kind, T0 + start * MIN, T0 + end * MIN)
    };
    Timeline::new(
        vec![
            segment("node-1", Drain, 0, 5),
            segment("node-1", Maintenance, 5, 20),
            segment("node-1", Reboot, 20, 30),
            segment("node-1", Verify, 30, 35),
            segment("node-2", Wait, 0, 35),
            segment("node-2", Window, 35, 60),
            Segment::open(node("node-3"), Window, T0 + 40 * MIN, T0 + 60 * MIN),
        ],
        vec![Marker {
            node: node("node-2"),
            kind: MarkerKind::Failed,
            at: T0 + 60 * MIN,
            cause: Some("drain timed out".to_owned()),
        }],
    )
    .unwrap()
}

/// The path of `program`, or a failure that says how to install it.
fn installed(program: &str, package: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "{program} is not installed: run scripts/install-packages {package} (scripts/test does)"
        )
    })
}

/// The colours of the decoded PNG at `path`, as RGB triples, and its pixel count.
fn colours(path: &Path) -> (Vec<[u8; 3]>, usize) {
    let file = std::fs::File::open(path).unwrap();
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().unwrap();
    let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buffer).unwrap();
    let channels = info.color_type.samples();
    let pixels: Vec<[u8; 3]> = buffer[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| match channels {
            1 | 2 => [p[0], p[0], p[0]],
            _ => [p[0], p[1], p[2]],
        })
        .collect();
    let count = pixels.len();
    (pixels, count)
}

/// Checks that the picture is not blank: it has many colours, a good share of pixels that are
/// not white, and the colours of the window, drain and maintenance bars and failure markers.
fn assert_shows_the_timeline(path: &Path) {
    let (pixels, count) = colours(path);
    let distinct: HashSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(distinct.len() > 20, "{} colours only", distinct.len());
    let coloured = pixels.iter().filter(|p| **p != [255, 255, 255]).count();
    assert!(
        coloured * 50 > count,
        "{coloured} of {count} pixels are not white"
    );
    for (name, rgb) in [
        ("window", [0x56, 0xb4, 0xe9]),
        ("drain", [0xe6, 0x9f, 0x00]),
        ("maintenance", [0x00, 0x72, 0xb2]),
        ("failed", [0xd5, 0x5e, 0x00]),
    ] {
        let close = pixels
            .iter()
            .filter(|p| p.iter().zip(rgb).all(|(a, b)| a.abs_diff(b) <= 8))
            .count();
        assert!(close >= 20, "{name}'s colour on {close} pixels only");
    }
}

#[test]
fn librsvg_renders_the_svg() {
    let rsvg = installed("rsvg-convert", "librsvg2-bin");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("timeline.svg");
    let png = dir.path().join("timeline.png");
    std::fs::write(&svg, rota_timeline::render_svg(&timeline())).unwrap();
    let out = Command::new(rsvg)
        .arg(&svg)
        .arg("-o")
        .arg(&png)
        .output()
        .unwrap();
    assert!(out.status.success(), "rsvg-convert: {out:?}");
    assert!(
        out.stderr.is_empty(),
        "rsvg-convert warned: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_shows_the_timeline(&png);
}

#[test]
fn chromium_renders_the_html_page() {
    let chromium = installed("chromium", "chromium");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("timeline.html");
    let shot = dir.path().join("timeline.png");
    std::fs::write(
        &page,
        rota_timeline::render_html(&timeline(), "rota rollout timeline"),
    )
    .unwrap();
    // The flags that work on a closed network (no background connections), as root, without
    // a GPU; a fresh profile so that nothing from an earlier run is reused. `timeout` ends a
    // browser that hangs instead of the test.
    let out = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            // Whatever the browser would still fetch on its own (field trials, safe browsing)
            // resolves no host and goes to a closed port on loopback: the test sends nothing
            // off this machine.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=http://127.0.0.1:9",
            "--hide-scrollbars",
            "--window-size=1200,900",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success() && shot.is_file(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_shows_the_timeline(&shot);
}
