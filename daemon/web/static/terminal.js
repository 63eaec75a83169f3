// Tool output as a terminal shows it: the SGR escape sequences (colours,
// bold, italic, underline, inverse, strike-through) become classes of
// text spans; every other escape sequence and control character is
// dropped, and a carriage return rewrites its line. The output is
// hostile: it only ever becomes text nodes and class names from the
// fixed list below, never HTML or a style.

// An unfinished escape sequence waits for the next piece of output, up
// to this many characters; longer, its introducer is dropped and the
// rest shown as text.
const MAX_PENDING = 4096;

// The xterm colours by number, for 256-colour and RGB codes, which are
// shown as the nearest of the 16 the stylesheet defines per theme.
const BASE = [
  [0, 0, 0], [205, 0, 0], [0, 205, 0], [205, 205, 0], [0, 0, 238], [205, 0, 205], [0, 205, 205], [229, 229, 229],
  [127, 127, 127], [255, 0, 0], [0, 255, 0], [255, 255, 0], [92, 92, 255], [255, 0, 255], [0, 255, 255], [255, 255, 255],
];

function nearest(r, g, b) {
  let best = 0;
  let dist = Infinity;
  BASE.forEach(([x, y, z], i) => {
    const d = (x - r) ** 2 + (y - g) ** 2 + (z - b) ** 2;
    if (d < dist) { dist = d; best = i; }
  });
  return best;
}

function colour256(n) {
  if (n < 16) return n;
  if (n < 232) {
    const v = (c) => (c ? 55 + 40 * c : 0);
    n -= 16;
    return nearest(v(Math.floor(n / 36)), v(Math.floor(n / 6) % 6), v(n % 6));
  }
  const g = 8 + 10 * (n - 232);
  return nearest(g, g, g);
}

const clamp = (v) => Math.max(0, Math.min(255, v | 0));

export class Terminal {
  constructor(target) {
    this.target = target;
    this.clear();
  }

  // clear empties the output and resets the state.
  clear() {
    this.target.replaceChildren();
    this.style = {};
    this.pending = '';
    this.line = []; // the nodes of the current line
    this.cr = false; // a carriage return: the next text rewrites the line
    this.lines = 0;
  }

  classes() {
    const s = this.style;
    let fg = s.fg;
    let bg = s.bg;
    const c = [];
    if (s.inverse) {
      c.push(bg == null ? 't-fg-inv' : `t-fg-${bg}`, fg == null ? 't-bg-inv' : `t-bg-${fg}`);
      fg = bg = undefined;
    }
    if (fg != null) c.push(`t-fg-${fg}`);
    if (bg != null) c.push(`t-bg-${bg}`);
    if (s.bold) c.push('t-b');
    if (s.dim && fg == null && !s.inverse) c.push('t-d');
    if (s.italic) c.push('t-i');
    if (s.underline) c.push('t-u');
    if (s.strike) c.push('t-s');
    return c.join(' ');
  }

  sgr(params) {
    const p = params === '' ? [0] : params.split(/[;:]/).slice(0, 32).map((x) => (x === '' ? 0 : Number(x)));
    let s = this.style;
    for (let i = 0; i < p.length; i++) {
      const n = p[i];
      if (n === 0) s = this.style = {};
      else if (n === 1) s.bold = true;
      else if (n === 2) s.dim = true;
      else if (n === 3) s.italic = true;
      else if (n === 4 || n === 21) s.underline = true;
      else if (n === 7) s.inverse = true;
      else if (n === 9) s.strike = true;
      else if (n === 22) s.bold = s.dim = false;
      else if (n === 23) s.italic = false;
      else if (n === 24) s.underline = false;
      else if (n === 27) s.inverse = false;
      else if (n === 29) s.strike = false;
      else if (n >= 30 && n <= 37) s.fg = n - 30;
      else if (n === 39) s.fg = null;
      else if (n >= 40 && n <= 47) s.bg = n - 40;
      else if (n === 49) s.bg = null;
      else if (n >= 90 && n <= 97) s.fg = n - 82;
      else if (n >= 100 && n <= 107) s.bg = n - 92;
      else if (n === 38 || n === 48) {
        let c = null;
        if (p[i + 1] === 5) { c = colour256(clamp(p[i + 2])); i += 2; }
        else if (p[i + 1] === 2) { c = nearest(clamp(p[i + 2]), clamp(p[i + 3]), clamp(p[i + 4])); i += 4; }
        if (c != null) { if (n === 38) s.fg = c; else s.bg = c; }
      }
    }
  }

  emit(text, out) {
    if (!text) return;
    if (this.cr) {
      for (const n of this.line) n.remove();
      this.line = [];
      this.cr = false;
    }
    const cls = this.classes();
    const node = cls ? Object.assign(document.createElement('span'), { className: cls, textContent: text }) : document.createTextNode(text);
    out.append(node);
    this.line.push(node);
  }

  // write shows the next piece of output.
  write(chunk) {
    const s = this.pending + chunk;
    this.pending = '';
    const out = document.createDocumentFragment();
    let run = '';
    const flush = () => { this.emit(run, out); run = ''; };
    for (let i = 0; i < s.length; i++) {
      const ch = s.charCodeAt(i);
      if (ch === 0x1b) {
        const end = this.escape(s, i);
        if (end < 0) { // unfinished
          if (s.length - i <= MAX_PENDING) { this.pending = s.slice(i); break; }
          continue; // drop the introducer
        }
        if (end.sgr != null) { flush(); this.sgr(end.sgr); }
        i = end.next - 1;
      } else if (ch === 0x0a) {
        run += '\n';
        flush();
        this.line = [];
        this.cr = false;
        this.lines++;
      } else if (ch === 0x0d) {
        if (i + 1 === s.length) { this.pending = '\r'; break; }
        if (s.charCodeAt(i + 1) !== 0x0a) { flush(); this.cr = true; }
      } else if (ch === 0x09 || (ch >= 0x20 && ch !== 0x7f && (ch < 0x80 || ch > 0x9f))) {
        run += s[i];
      }
      // Any other control character is dropped.
    }
    flush();
    this.target.append(out);
  }

  // escape reads the sequence at s[i] (ESC): {next, sgr} (sgr the
  // parameters of an SGR sequence, null for one that is dropped), or -1
  // when it is not finished yet.
  escape(s, i) {
    if (i + 1 >= s.length) return -1;
    const kind = s[i + 1];
    let j = i + 2;
    if (kind === '[') { // CSI: parameters, intermediates, a final byte
      const start = j;
      while (j < s.length && s.charCodeAt(j) >= 0x30 && s.charCodeAt(j) <= 0x3f) j++;
      const params = s.slice(start, j);
      const mid = j;
      while (j < s.length && s.charCodeAt(j) >= 0x20 && s.charCodeAt(j) <= 0x2f) j++;
      if (j >= s.length) return -1;
      const f = s.charCodeAt(j);
      if (f < 0x40 || f > 0x7e) return { next: j, sgr: null }; // malformed: dropped up to here
      const sgr = s[j] === 'm' && mid === j && /^[0-9;:]*$/.test(params) ? params : null;
      return { next: j + 1, sgr };
    }
    if (kind === ']' || kind === 'P' || kind === 'X' || kind === '^' || kind === '_') {
      // OSC (ended by BEL or ST), DCS, SOS, PM, APC (ended by ST): dropped whole.
      for (; j < s.length; j++) {
        if (kind === ']' && s.charCodeAt(j) === 0x07) return { next: j + 1, sgr: null };
        if (s.charCodeAt(j) === 0x1b) {
          if (j + 1 >= s.length) return -1;
          if (s[j + 1] === '\\') return { next: j + 2, sgr: null };
        }
      }
      return -1;
    }
    // Any other: intermediates, then a final byte.
    j = i + 1;
    while (j < s.length && s.charCodeAt(j) >= 0x20 && s.charCodeAt(j) <= 0x2f) j++;
    if (j >= s.length) return -1;
    return { next: j + 1, sgr: null };
  }
}
