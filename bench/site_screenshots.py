"""Screenshots of the course site in headless Chromium: the index and a training page.

Build the site first (``make book``), then::

    python bench/site_screenshots.py                  # writes build/screenshots/*.png

Chromium comes from Debian's packages (``apt-get install chromium``); the script
says so when it is missing. Pages are opened from disk (``file://``): the site
needs no server and no network.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("index", "05_sync_training_loop", "07_evaluating_a_trained_model")


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("No Chromium found: install it with `apt-get install chromium`.")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--site", default=str(ROOT / "build" / "book" / "_build" / "html"))
    p.add_argument("--out", default=str(ROOT / "build" / "screenshots"))
    p.add_argument("--pages", nargs="+", default=list(PAGES))
    p.add_argument("--height", type=int, default=2400)
    args = p.parse_args(argv)
    site, out = Path(args.site), Path(args.out)
    if not (site / "index.html").is_file():
        sys.exit(f"No site at {site}: run `make book` first.")
    out.mkdir(parents=True, exist_ok=True)
    browser = chromium()
    for page in args.pages:
        target = out / f"{page}.png"
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--window-size=1280,{args.height}",
                "--virtual-time-budget=8000",  # let MathJax typeset before the shot
                f"--screenshot={target}",
                (site / f"{page}.html").as_uri(),
            ],
            check=True,
            capture_output=True,
        )
        print(f"{page}: {target}")


if __name__ == "__main__":
    main()
