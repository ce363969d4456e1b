// Building elements node by node: every string the gateway sends ends up as text, never parsed as markup.

// h creates an element. props: class, text, title, and any attribute; on<Event> functions become listeners;
// children may be strings, numbers, nodes, arrays of them, or null/false (skipped).
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2).toLowerCase(), v);
      else if (k === 'value') el.value = v;
      else if (k === 'checked' || k === 'disabled' || k === 'selected') el[k] = !!v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// replace swaps an element's children.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// A table from column headers and rows of cells; a column given as {label, num: true} is right-aligned.
export function table(columns, rows, opts = {}) {
  const head = h('tr', null, columns.map((c) => {
    const col = typeof c === 'string' ? { label: c } : c;
    return h('th', { scope: 'col', class: col.num ? 'num' : null }, col.label);
  }));
  const body = h('tbody');
  for (const r of rows) body.appendChild(r instanceof Node ? r : h('tr', null, r.map((cell, i) => {
    const col = typeof columns[i] === 'string' ? {} : columns[i] || {};
    return cell instanceof Node && cell.tagName === 'TD' ? cell : h('td', { class: col.num ? 'num' : null }, cell);
  })));
  return h('div', { class: 'table-wrap' + (opts.scroll ? ' scroll-y' : '') },
    h('table', { 'aria-label': opts.label || null }, h('thead', null, head), body));
}

export const fmt = {
  ms(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return '–';
    if (v >= 10000) return (v / 1000).toFixed(1) + ' s';
    if (v >= 100) return Math.round(v) + ' ms';
    if (v >= 10) return v.toFixed(1) + ' ms';
    return v.toFixed(2) + ' ms';
  },
  bytes(n) {
    if (n === null || n === undefined || Number.isNaN(n)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(n) : n.toFixed(n >= 100 ? 0 : 1)) + ' ' + units[i];
  },
  pct(x) {
    if (x === null || x === undefined || Number.isNaN(x)) return '–';
    return (x * 100).toFixed(x >= 0.995 || x === 0 ? 0 : 1) + '%';
  },
  num(x, digits = 1) {
    if (x === null || x === undefined || Number.isNaN(x)) return '–';
    return x.toFixed(digits);
  },
  mbps(m) {
    if (!m) return 'unknown';
    if (m >= 1000) return (m / 1000).toFixed(m % 1000 ? 1 : 0) + ' Gb/s';
    return m + ' Mb/s';
  },
  short(id, n = 8) {
    if (!id) return '';
    const s = String(id);
    return s.length > n + 1 ? s.slice(0, n) + '…' : s;
  },
  time(t) {
    const d = t instanceof Date ? t : new Date(t);
    if (Number.isNaN(d.getTime())) return '–';
    return d.toLocaleTimeString([], { hour12: false });
  },
};

// debounce delays fn until calls stop for ms.
export function debounce(fn, ms) {
  let timer = 0;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

// swap replaces a container's content and keeps the keyboard focus where it was: on the element with the same
// data-key in the new content, if any. Views re-render every few seconds; a keyboard user must not lose their
// place.
export function swap(container, ...children) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.getAttribute('data-key') : null;
  replace(container, ...children);
  if (key) {
    const again = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}
