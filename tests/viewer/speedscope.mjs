// Opens a profile in the speedscope web app (its npm package) in headless Chromium, offline, and
// checks what the page shows: no import error, the expected functions in its sandwich table, and
// the expected functions one after the other (each shown only after the whole of the one
// before it) along the time-ordered flame chart.
//
// Usage: node speedscope.mjs --chromium PATH --profile FILE --order f1,f2,f4 [--shot DIR]
//
// Node's own modules only (no browser driver package): Chromium is driven through its DevTools
// protocol over a pipe (--remote-debugging-pipe: commands on its fd 3, replies on its fd 4, each
// message a JSON text ended by a NUL byte). The page, the app and the profile are served on
// loopback; every other host name fails to resolve in the browser, and any request that is not to
// the loopback server fails the check. Exits 0 when every check holds, 1 with the reasons when
// one does not, 2 on bad usage or missing pieces.

import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const APP = join(HERE, "node_modules/speedscope/dist/release");
// How long the page may take to import the profile and draw it.
const LOAD_LIMIT_MS = 15000;
// Small: Chromium draws speedscope's WebGL canvases in software here, after every mouse move,
// and that time grows with the pixels.
const VIEW = { width: 640, height: 400 };
// The whole check's limit, past which it gives up (the test's own limit is wider).
const WHOLE_LIMIT_MS = 60000;

function usage(message) {
  console.error(`speedscope.mjs: ${message}`);
  process.exit(2);
}

function parseArgs(argv) {
  const args = { shot: null };
  for (let i = 0; i < argv.length; i += 2) {
    const [key, value] = [argv[i], argv[i + 1]];
    if (value === undefined) usage(`${key} needs a value`);
    if (key === "--chromium") args.chromium = value;
    else if (key === "--profile") args.profile = resolve(value);
    else if (key === "--order") args.order = value.split(",").filter((s) => s !== "");
    else if (key === "--shot") args.shot = resolve(value);
    else usage(`unknown option ${key}`);
  }
  if (!args.chromium || !args.profile || !args.order?.length) {
    usage("needs --chromium, --profile and --order");
  }
  return args;
}

const TYPES = {
  ".html": "text/html",
  ".js": "text/javascript",
  ".css": "text/css",
  ".json": "application/json",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".woff2": "font/woff2",
  ".wasm": "application/wasm",
  ".txt": "text/plain",
};

// Serves the app's release folder at / and the profile at /profile/<its name>.
function serve(profile) {
  const profilePath = `/profile/${encodeURIComponent(basename(profile))}`;
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, "http://127.0.0.1").pathname);
    let file = null;
    if (path === decodeURIComponent(profilePath)) file = profile;
    else if (/^\/[\w.-]+$/.test(path)) file = join(APP, path.slice(1));
    else if (path === "/") file = join(APP, "index.html");
    let body = null;
    try {
      if (file && statSync(file).isFile()) body = readFileSync(file);
    } catch {
      body = null;
    }
    if (body === null) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
    res.end(body);
  });
  return new Promise((ok) => {
    server.listen(0, "127.0.0.1", () => ok({ server, origin: `http://127.0.0.1:${server.address().port}`, profilePath }));
  });
}

// A DevTools protocol client over Chromium's pipe.
class Browser {
  constructor(chromium, profileDir) {
    const flags = [
      "--headless=new",
      "--remote-debugging-pipe",
      `--user-data-dir=${profileDir}`,
      "--no-first-run",
      "--no-default-browser-check",
      "--disable-gpu",
      "--disable-extensions",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-dev-shm-usage",
      // Offline: no name but the loopback address resolves.
      "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
      `--window-size=${VIEW.width},${VIEW.height}`,
    ];
    // Chromium's sandbox refuses to start as root (CI runs as root).
    if (process.getuid?.() === 0) flags.push("--no-sandbox");
    // A process group of its own, so that its helper processes (renderer, GPU, network) can be
    // ended with it; it also ends by itself when the pipe closes with this process.
    this.proc = spawn(chromium, [...flags, "about:blank"], {
      stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"],
      detached: true,
    });
    this.stderr = "";
    this.proc.stderr.on("data", (d) => {
      this.stderr += d;
    });
    this.exited = new Promise((ok) => this.proc.on("exit", (code, signal) => ok({ code, signal })));
    this.proc.on("error", (e) => usage(`cannot start ${chromium}: ${e.message}`));
    this.next = 1;
    this.pending = new Map();
    this.listeners = [];
    let buffered = Buffer.alloc(0);
    this.proc.stdio[4].on("data", (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      for (let end = buffered.indexOf(0); end >= 0; end = buffered.indexOf(0)) {
        const message = JSON.parse(buffered.subarray(0, end).toString("utf8"));
        buffered = buffered.subarray(end + 1);
        this.dispatch(message);
      }
    });
    this.exited.then(({ code, signal }) => {
      for (const { fail } of this.pending.values()) {
        fail(new Error(`chromium exited (${code ?? signal}) before replying:\n${this.stderr}`));
      }
      this.pending.clear();
    });
  }

  dispatch(message) {
    if (message.id !== undefined) {
      const waiter = this.pending.get(message.id);
      this.pending.delete(message.id);
      if (!waiter) return;
      if (message.error) waiter.fail(new Error(`${waiter.method}: ${JSON.stringify(message.error)}`));
      else waiter.ok(message.result);
    } else {
      for (const listener of this.listeners) listener(message);
    }
  }

  send(method, params = {}, sessionId = undefined) {
    const id = this.next++;
    const message = { id, method, params };
    if (sessionId) message.sessionId = sessionId;
    return new Promise((ok, fail) => {
      this.pending.set(id, { ok, fail, method });
      this.proc.stdio[3].write(JSON.stringify(message) + "\0");
    });
  }

  on(listener) {
    this.listeners.push(listener);
  }

  async close() {
    try {
      await Promise.race([this.send("Browser.close"), new Promise((ok) => setTimeout(ok, 2000))]);
    } catch {
      // Already gone.
    }
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill("SIGKILL");
    await this.exited;
    this.killGroup();
  }

  // Ends whatever is left of the browser's process group (helpers still writing its profile).
  killGroup() {
    try {
      process.kill(-this.proc.pid, "SIGKILL");
    } catch {
      // None left.
    }
  }
}

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

// One page of the browser, attached with a session of its own.
class Page {
  static async open(browser) {
    const { targetId } = await browser.send("Target.createTarget", { url: "about:blank" });
    const { sessionId } = await browser.send("Target.attachToTarget", { targetId, flatten: true });
    const page = new Page(browser, sessionId);
    await page.send("Page.enable");
    await page.send("Runtime.enable");
    await page.send("Network.enable");
    await page.send("Emulation.setDeviceMetricsOverride", {
      width: VIEW.width,
      height: VIEW.height,
      deviceScaleFactor: 1,
      mobile: false,
    });
    return page;
  }

  constructor(browser, sessionId) {
    this.browser = browser;
    this.sessionId = sessionId;
    this.console = [];
    this.requests = [];
    this.dialogs = [];
    browser.on((m) => {
      if (m.sessionId !== sessionId) return;
      // speedscope tells of a file it cannot read with alert(), which blocks the page until
      // answered.
      if (m.method === "Page.javascriptDialogOpening") {
        this.dialogs.push(m.params.message);
        this.send("Page.handleJavaScriptDialog", { accept: true }).catch(() => {});
      }
      if (m.method === "Runtime.consoleAPICalled") {
        const text = m.params.args.map((a) => a.value ?? a.description ?? "").join(" ");
        this.console.push(`${m.params.type}: ${text}`);
      } else if (m.method === "Runtime.exceptionThrown") {
        const d = m.params.exceptionDetails;
        this.console.push(`exception: ${d.exception?.description ?? d.text}`);
      } else if (m.method === "Network.requestWillBeSent") {
        this.requests.push(m.params.request.url);
      }
    });
  }

  send(method, params = {}) {
    return this.browser.send(method, params, this.sessionId);
  }

  async eval(expression) {
    const { result, exceptionDetails } = await this.send("Runtime.evaluate", {
      expression,
      returnByValue: true,
      awaitPromise: true,
    });
    if (exceptionDetails) throw new Error(`page: ${exceptionDetails.exception?.description ?? exceptionDetails.text}`);
    return result.value;
  }

  async mouse(type, x, y) {
    await this.send("Input.dispatchMouseEvent", { type, x, y, button: "left", clickCount: type === "mouseMoved" ? 0 : 1 });
  }

  async screenshot(path) {
    const { data } = await this.send("Page.captureScreenshot", { format: "png" });
    writeFileSync(path, Buffer.from(data, "base64"));
  }
}

// Waits until speedscope shows its view of the profile or its error, with the page's text.
async function loaded(page) {
  const start = Date.now();
  for (;;) {
    if (page.dialogs.length > 0) return { error: `the page said: ${page.dialogs.join("; ")}` };
    const state = await page.eval(`(() => {
      const text = document.body ? document.body.innerText : "";
      const canvases = document.querySelectorAll("canvas").length;
      return { text, canvases };
    })()`);
    if (state.text.includes("Something went wrong")) return { error: state.text };
    if (/Time Order/.test(state.text) && /Sandwich/.test(state.text) && state.canvases > 0) return state;
    if (Date.now() - start > LOAD_LIMIT_MS) return { error: `page not ready after ${LOAD_LIMIT_MS} ms:\n${state.text}` };
    await sleep(100);
  }
}

// Clicks the toolbar's tab whose label ends with `label` with the mouse, as a person would.
async function clickTab(page, label) {
  const box = await page.eval(`(() => {
    const tab = [...document.querySelectorAll("div")]
      .find((e) => e.textContent.trim().endsWith(${JSON.stringify(label)}) && e.textContent.trim().length < 20);
    if (!tab) return null;
    const r = tab.getBoundingClientRect();
    return { x: r.x + r.width / 2, y: r.y + r.height / 2 };
  })()`);
  if (!box) return false;
  await page.mouse("mouseMoved", box.x, box.y);
  await page.mouse("mousePressed", box.x, box.y);
  await page.mouse("mouseReleased", box.x, box.y);
  return true;
}

// The sandwich view's table: each row's cells, top to bottom.
async function sandwichRows(page) {
  if (!(await clickTab(page, "Sandwich"))) return { error: "no Sandwich tab on the page" };
  const start = Date.now();
  for (;;) {
    const rows = await page.eval(`(() => {
      return [...document.querySelectorAll("table tr")]
        .map((tr) => [...tr.querySelectorAll("td")].map((td) => td.innerText.trim()))
        .filter((cells) => cells.length > 0);
    })()`);
    if (rows && rows.length > 0) return { rows };
    if (Date.now() - start > LOAD_LIMIT_MS) return { error: "the sandwich view shows no table" };
    await sleep(100);
  }
}

// The function name in speedscope's hover tooltip, or null when none is shown. The tooltip is
// an element placed with an inline left/top holding one block: a duration in a span, the name
// as text, the file in a div.
const HOVERED = `(() => {
  const tip = [...document.querySelectorAll("div[style*='left'][style*='top']")]
    .find((e) => e.firstElementChild && e.firstElementChild.querySelector("span"));
  if (!tip) return null;
  const block = tip.firstElementChild;
  const name = [...block.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE)
    .map((n) => n.textContent).join("").trim();
  return name === "" ? null : name;
})()`;

// Where each function first and last shows in the time-ordered flame chart: the mouse is moved
// across the chart along each row of frames, from the top row down to the first empty row, and
// the hover tooltip read at each step. Returns { first: {name: x}, last: {name: x}, rows }.
async function timeOrder(page) {
  if (!(await clickTab(page, "Time Order"))) return { error: "no Time Order tab on the page" };
  await sleep(200);
  // The tallest canvas under the toolbar is the flame chart (the minimap above it is shorter;
  // the full-page canvas behind everything is the WebGL one and has no top offset).
  const chart = await page.eval(`(() => {
    const boxes = [...document.querySelectorAll("canvas")].map((c) => c.getBoundingClientRect())
      .filter((r) => r.width > 0 && r.height > 0 && r.y > 0)
      .map((r) => ({ x: r.x, y: r.y, width: r.width, height: r.height }));
    boxes.sort((a, b) => b.height - a.height);
    return boxes[0] ?? null;
  })()`);
  if (!chart) return { error: "no flame chart canvas" };
  const first = {};
  const last = {};
  const rows = [];
  let moves = 0;
  // Steps of 20 px across, and one step down per row of frames: speedscope's rows are 20 px
  // high under a 20 px time axis, so y is each row's middle from the top row of frames down.
  const steps = 31;
  const rowStep = 20;
  for (let y = chart.y + 30; y < chart.y + chart.height; y += rowStep) {
    // Every 5th step first: a row where none shows a frame is taken as empty (frames narrower
    // than that are not what this check looks for), which keeps empty rows cheap.
    const at = new Map();
    const visit = async (i) => {
      moves += 1;
      const x = chart.x + 1 + ((chart.width - 2) * i) / steps;
      await page.mouse("mouseMoved", x, y);
      at.set(i, { x, name: await page.eval(HOVERED) });
    };
    // Each pass starts from off the chart and goes left to right, so that a tooltip read before
    // the page caught up with the mouse could only show a name further left, never one from
    // the right (which would put it earlier in time than it is).
    const offChart = async () => page.mouse("mouseMoved", VIEW.width / 2, 2);
    await offChart();
    for (let i = 0; i <= steps; i += 5) await visit(i);
    if ([...at.values()].some((v) => v.name !== null)) {
      await offChart();
      for (let i = 0; i <= steps; i++) if (!at.has(i)) await visit(i);
    }
    const names = [];
    for (const i of [...at.keys()].sort((a, b) => a - b)) {
      const { x, name } = at.get(i);
      if (name === null) continue;
      if (!(name in first) || x < first[name]) first[name] = x;
      if (!(name in last) || x > last[name]) last[name] = x;
      if (names[names.length - 1] !== name) names.push(name);
    }
    rows.push({ y, names });
    // A flame chart has no gaps: below the deepest frame every row is empty.
    if (names.length === 0) break;
  }
  if (rows.length === 0 || rows[0].names.length === 0) return { error: "the time-ordered chart shows no frame" };
  return { first, last, rows, moves };
}

// The checks on what the page showed; each failure is a sentence.
function judge(order, sandwich, timeline) {
  const failures = [];
  if (sandwich.error) {
    failures.push(sandwich.error);
  } else {
    // The table's function-name column: the cell that is not a duration or a percentage.
    const names = new Set(sandwich.rows.map((cells) => cells[cells.length - 1]));
    const missing = order.filter((n) => !names.has(n));
    if (missing.length > 0) {
      failures.push(`the sandwich table lacks ${missing.join(", ")} (it lists ${[...names].join(", ")})`);
    }
  }
  if (timeline.error) {
    failures.push(timeline.error);
  } else {
    const missing = order.filter((n) => !(n in timeline.first));
    if (missing.length > 0) {
      failures.push(`the time-ordered chart shows no ${missing.join(", ")} (it shows ${Object.keys(timeline.first).join(", ")})`);
    }
    // The workload runs in phases: each function shows only right of (later than) the whole
    // of the one before it.
    const shown = order.filter((n) => n in timeline.first);
    const at = (x) => x.toFixed(0);
    for (let i = 1; i < shown.length; i++) {
      const [a, b] = [shown[i - 1], shown[i]];
      if (!(timeline.first[a] < timeline.first[b])) {
        failures.push(`the time-ordered chart shows ${b} from x=${at(timeline.first[b])}, not after ${a} (from x=${at(timeline.first[a])})`);
      } else if (!(timeline.last[a] < timeline.first[b])) {
        failures.push(`the time-ordered chart shows ${a} until x=${at(timeline.last[a])}, after ${b} began (x=${at(timeline.first[b])})`);
      }
    }
  }
  return failures;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  try {
    statSync(join(APP, "index.html"));
  } catch {
    usage(`no speedscope app at ${APP}: run \`npm ci --prefix tests/viewer\``);
  }
  const { server, origin, profilePath } = await serve(args.profile);
  const profileDir = mkdtempSync(join(tmpdir(), "hvprof-viewer-"));
  const browser = new Browser(args.chromium, profileDir);
  setTimeout(() => {
    console.log(`FAIL: no verdict within ${WHOLE_LIMIT_MS} ms; chromium said:\n${browser.stderr}`);
    browser.proc.kill("SIGKILL");
    browser.killGroup();
    rmSync(profileDir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    process.exit(1);
  }, WHOLE_LIMIT_MS).unref();
  const failures = [];
  try {
    const version = await browser.send("Browser.getVersion");
    console.log(`browser: ${version.product}`);
    console.log(`app: ${readFileSync(join(APP, "release.txt"), "utf8").split("\n")[0]}`);
    const page = await Page.open(browser);
    const times = [["start", performance.now()]];
    const hash = `profileURL=${encodeURIComponent(origin + profilePath)}`;
    const nav = await page.send("Page.navigate", { url: `${origin}/index.html#${hash}` });
    const state = nav.errorText ? { error: `navigation failed: ${nav.errorText}` } : await loaded(page);
    times.push(["load", performance.now()]);
    if (args.shot) await page.screenshot(join(args.shot, "loaded.png"));
    if (state.error) {
      failures.push(`speedscope did not show the profile: ${state.error}`);
    } else {
      // The toolbar's middle: the profile's name (for perf text: comm, pid and tid).
      console.log(`page: ${state.text.replace(/\s+/g, " ")}`);
      const sandwich = await sandwichRows(page);
      times.push(["sandwich", performance.now()]);
      if (args.shot) await page.screenshot(join(args.shot, "sandwich.png"));
      if (!sandwich.error) {
        console.log("sandwich table:");
        for (const cells of sandwich.rows) console.log(`  ${cells.join(" | ")}`);
      }
      const timeline = await timeOrder(page);
      times.push([`chart (${timeline.moves} mouse moves)`, performance.now()]);
      if (args.shot) await page.screenshot(join(args.shot, "time-order.png"));
      if (!timeline.error) {
        console.log("time-ordered chart, each row's names left to right:");
        for (const row of timeline.rows.filter((r) => r.names.length > 0)) {
          console.log(`  y=${row.y}: ${row.names.join(" ")}`);
        }
        const spans = Object.keys(timeline.first).map((n) => `${n} ${timeline.first[n].toFixed(0)}-${timeline.last[n].toFixed(0)}`);
        console.log(`  spans (x): ${spans.join(", ")}`);
      }
      failures.push(...judge(args.order, sandwich, timeline));
    }
    const foreign = page.requests.filter((u) => !u.startsWith(`${origin}/`) && !u.startsWith("data:") && !u.startsWith("blob:"));
    if (foreign.length > 0) failures.push(`the page asked for what is not on loopback: ${foreign.join(", ")}`);
    const phases = times.slice(1).map(([name, t], i) => `${name} ${(t - times[i][1]).toFixed(0)} ms`);
    console.log(`time: browser start ${times[0][1].toFixed(0)} ms after node's, ${phases.join(", ")}`);
    console.log(`page console:\n  ${page.console.join("\n  ")}`);
  } finally {
    await browser.close();
    server.close();
    // Chromium's helper processes may still be writing there for a moment after it exits.
    try {
      rmSync(profileDir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    } catch (e) {
      console.log(`note: ${profileDir} left behind: ${e.message}`);
    }
  }
  if (failures.length > 0) {
    console.log(failures.map((f) => `FAIL: ${f}`).join("\n"));
    process.exit(1);
  }
  console.log(`ok: speedscope shows ${args.order.join(", ")} in that order`);
}

main().catch((e) => {
  console.error(`speedscope.mjs: ${e.stack ?? e}`);
  process.exit(1);
});
