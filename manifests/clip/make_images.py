"""Writes the example image corpus (images/*.png): 12 shapes in 4 colours on light backgrounds, of
different sizes and aspect ratios, so that resize and crop have work to do. Deterministic; the PNGs
are committed, and this script says how they were made.

    python manifests/clip/make_images.py
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (235, 200, 30)}
SHAPES = ("circle", "square", "triangle")
SIZES = ((320, 240), (240, 320), (300, 300), (400, 225))


def draw(shape: str, colour: tuple[int, int, int], size: tuple[int, int], shade: int) -> Image.Image:
    w, h = size
    im = Image.new("RGB", size, (245 - shade, 245 - shade // 2, 240))
    d = ImageDraw.Draw(im)
    r = min(w, h) * 0.35
    cx, cy = w / 2, h / 2
    box = (cx - r, cy - r, cx + r, cy + r)
    if shape == "circle":
        d.ellipse(box, fill=colour)
    elif shape == "square":
        d.rectangle(box, fill=colour)
    else:
        d.polygon([(cx, cy - r), (cx + r, cy + r), (cx - r, cy + r)], fill=colour)
    return im


def main() -> None:
    out = Path(__file__).resolve().parent / "images"
    out.mkdir(exist_ok=True)
    for i, shape in enumerate(SHAPES):
        for j, (name, colour) in enumerate(COLOURS.items()):
            draw(shape, colour, SIZES[(i + j) % len(SIZES)], 8 * j).save(out / f"{name}_{shape}.png", optimize=False)


if __name__ == "__main__":
    main()
