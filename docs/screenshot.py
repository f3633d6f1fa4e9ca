"""Makes docs/screenshot.png, the README's picture of the HTML page: traces
examples/demo.py with `run -o demo.html`, selects one call as a user's click would
(found by hovering, through the page's own tooltip), and takes a screenshot in
headless Chromium.

    python docs/screenshot.py [--chromium /usr/bin/chromium] [--size 1400,1700]

Run it with the pytrace_cffi to show importable (e.g. PYTHONPATH=. after
`python build_ffi.py`).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# After the page has drawn: hover over the timeline, right to left and top to
# bottom, until the tooltip names the call to select; click it there.
SELECT = """<script>
window.addEventListener("load", () => requestAnimationFrame(() => {
  const canvas = document.getElementById("canvas");
  const tip = document.getElementById("tooltip");
  const box = canvas.getBoundingClientRect();
  for (let y = 30; y < box.height; y += 4) {
    for (let x = box.width - 2; x > 0; x -= 2) {
      const at = {clientX: box.left + x, clientY: box.top + y, bubbles: true};
      canvas.dispatchEvent(new MouseEvent("mousemove", at));
      if (tip.style.display === "block" && tip.textContent.includes(WANTED)) {
        canvas.dispatchEvent(new MouseEvent("mousedown", at));
        canvas.dispatchEvent(new MouseEvent("mouseup", at));
        canvas.dispatchEvent(new MouseEvent("mouseleave", at));
        return;
      }
    }
  }
}));
</script>
</body>"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--size", default="1400,1700", help="the window, WIDTH,HEIGHT")
    parser.add_argument("--select", default=": fetch",
                        help="select the first call (from the top right) whose name has this")
    parser.add_argument("--out", default=os.path.join(HERE, "screenshot.png"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        shutil.copy(os.path.join(ROOT, "examples", "demo.py"), work)
        subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "-o", "demo.html",
                        "demo.py"], cwd=work, check=True)
        with open(os.path.join(work, "demo.html"), encoding="utf-8") as f:
            page = f.read()
        script = SELECT.replace("WANTED", repr(args.select))
        with open(os.path.join(work, "demo.html"), "w", encoding="utf-8") as f:
            f.write(page.replace("</body>", script, 1))
        subprocess.run([args.chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--no-first-run", "--disable-sync",
                        "--disable-background-networking", "--disable-component-update",
                        f"--user-data-dir={os.path.join(work, 'profile')}",
                        f"--window-size={args.size}", "--virtual-time-budget=5000",
                        f"--screenshot={os.path.abspath(args.out)}",
                        "file://" + os.path.join(work, "demo.html")],
                       check=True, capture_output=True)
    print(args.out)


if __name__ == "__main__":
    main()
