// kneecap's live page: draws /status and /live/history, read-only.
// Every value from the gateway is written with textContent or as an SVG
// attribute, never parsed as markup.
'use strict';
(function () {
  const SVG = 'http://www.w3.org/2000/svg';
  const STATUS_EVERY = 1000; // ms
  const HISTORY_SPAN = 600; // seconds drawn
  const REASON_COLORS = {
    queue_full: '#b91c1c', queue_timeout: '#ea580c', deadline: '#7c3aed', shed: '#0891b2',
    draining: '#64748b', body_budget: '#be185d', other: '#a3a3a3',
  };

  // A white outline under a label keeps it readable over the lines.
  const HALO = { stroke: '#fff', 'stroke-width': 4, 'stroke-linejoin': 'round', 'paint-order': 'stroke' };

  const $ = (id) => document.getElementById(id);
  const num = (x) => (typeof x === 'number' && Number.isFinite(x) ? x : null);
  const obj = (x) => (x !== null && typeof x === 'object' && !Array.isArray(x) ? x : null);
  const arr = (x) => (Array.isArray(x) ? x : []);

  function el(parent, tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) {
      if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, attrs[k]);
    }
    if (text !== undefined) e.textContent = text;
    parent.appendChild(e);
    return e;
  }
  function html(parent, tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    parent.appendChild(e);
    return e;
  }
  function clear(e) {
    while (e.firstChild) e.removeChild(e.firstChild);
  }

  // Formatting. Durations arrive in seconds.
  function fmtDur(s) {
    s = num(s);
    if (s === null) return '–';
    const a = Math.abs(s);
    if (a === 0) return '0';
    const p3 = (v) => String(parseFloat(v.toPrecision(3)));
    if (a < 1e-3) return p3(s * 1e6) + ' µs';
    if (a < 1) return p3(s * 1e3) + ' ms';
    if (a < 120) return p3(s) + ' s';
    return (s / 60).toFixed(1) + ' min';
  }
  function fmtNum(x, digits) {
    x = num(x);
    if (x === null) return '–';
    if (Math.abs(x) >= 1e4) return Math.round(x).toLocaleString('en');
    const s = x.toFixed(digits === undefined ? (Math.abs(x) < 10 ? 2 : 1) : digits);
    return s.includes('.') ? s.replace(/\.?0+$/, '') : s;
  }
  function fmtPct(x) {
    x = num(x);
    return x === null ? '–' : (100 * x).toFixed(x >= 0.995 && x < 1 ? 1 : 0) + ' %';
  }
  function fmtInt(x) {
    x = num(x);
    return x === null ? '–' : Math.round(x).toLocaleString('en');
  }
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    // Maxima whose quarters (the grid) are round numbers.
    for (const m of [1, 1.2, 1.6, 2, 2.4, 3, 4, 6, 8, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }
  function ticks(max, n) {
    const out = [];
    for (let i = 0; i <= n; i++) out.push((max * i) / n);
    return out;
  }

  // A frame of a chart: plot area, scales, horizontal grid and axis labels.
  function frame(svg, W, H, m, xDomain, yMax, yFmt) {
    clear(svg);
    const f = {
      x0: m.l, x1: W - m.r, y0: H - m.b, y1: m.t,
      sx: (x) => f.x0 + ((x - xDomain[0]) / (xDomain[1] - xDomain[0] || 1)) * (f.x1 - f.x0),
      sy: (y) => f.y0 - (y / (yMax || 1)) * (f.y0 - f.y1),
    };
    for (const t of ticks(yMax, 4)) {
      el(svg, 'line', { x1: f.x0, x2: f.x1, y1: f.sy(t), y2: f.sy(t), stroke: '#e5e7eb' });
      el(svg, 'text', { x: f.x0 - 6, y: f.sy(t) + 4, 'text-anchor': 'end' }, yFmt(t));
    }
    el(svg, 'line', { x1: f.x0, x2: f.x1, y1: f.y0, y2: f.y0, stroke: '#9ca3af' });
    return f;
  }
  function path(points) {
    let d = '';
    let pen = false;
    for (const [x, y] of points) {
      if (x === null || y === null) {
        pen = false;
        continue;
      }
      d += (pen ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
      pen = true;
    }
    return d;
  }

  // The learned curve.
  function drawCurve(st) {
    const svg = $('curve');
    const ctl = obj(st.controller);
    const cap = num(st.limit);
    const levels = arr(ctl && ctl.levels).filter((l) => obj(l) && num(l.running) !== null && l.running >= 1);
    const pct = num(ctl && ctl.percentile);
    const plateau = validPlateau(ctl && ctl.plateau);
    let xMax = Math.max(2, cap || 1, ...levels.map((l) => l.running));
    let xMin = Math.min(1, ...levels.map((l) => l.running));
    if (plateau) xMax = Math.max(xMax, plateau.to);
    const g = (l) => num(l.predicted_goodput_requests_per_second);
    const mg = (l) => (num(l.dwell_seconds) > 0 ? num(l.measured_goodput_requests_per_second) : null);
    const yMax = niceMax(Math.max(0, ...levels.map((l) => Math.max(g(l) || 0, mg(l) || 0))) * 1.1);
    const W = 960, H = 340;
    const f = frame(svg, W, H, { l: 56, r: 56, t: 16, b: 42 }, [xMin - 0.5, xMax + 0.5], yMax, (v) => fmtNum(v));
    svg.setAttribute('data-levels', String(levels.length));
    const sa = (a) => f.y0 - a * (f.y0 - f.y1);
    for (const t of [0, 0.5, 1]) el(svg, 'text', { x: f.x1 + 6, y: sa(t) + 4 }, fmtPct(t));
    el(svg, 'text', { x: 14, y: (f.y0 + f.y1) / 2, transform: 'rotate(-90 14 ' + (f.y0 + f.y1) / 2 + ')', 'text-anchor': 'middle' }, 'goodput (req/s)');
    el(svg, 'text', { x: W - 16, y: (f.y0 + f.y1) / 2, transform: 'rotate(90 ' + (W - 16) + ' ' + (f.y0 + f.y1) / 2 + ')', 'text-anchor': 'middle' }, 'attainment');
    el(svg, 'text', { x: (f.x0 + f.x1) / 2, y: H - 6, 'text-anchor': 'middle' }, 'requests running on the engine (concurrency level)');
    const step = Math.max(1, Math.ceil((xMax - xMin + 1) / 24));
    for (let n = Math.ceil(xMin / step) * step; n <= xMax; n += step) {
      if (n < 1) continue;
      el(svg, 'text', { x: f.sx(n), y: f.y0 + 16, 'text-anchor': 'middle' }, String(n));
    }

    // The plateau, when the controller publishes one.
    $('plateau-key').classList.toggle('hidden', !plateau);
    $('plateau-text').textContent = plateau ? 'plateau' + (plateau.noise !== null ? ' (noise ±' + fmtNum(plateau.noise) + ' req/s)' : '') : '';
    if (plateau) {
      const a = f.sx(Math.max(plateau.from - 0.5, xMin - 0.5)), b = f.sx(Math.min(plateau.to + 0.5, xMax + 0.5));
      el(svg, 'rect', { id: 'plateau', x: a, y: f.y1, width: Math.max(b - a, 1), height: f.y0 - f.y1, fill: 'rgba(16,185,129,.16)',
        'data-from': plateau.from, 'data-to': plateau.to });
      if (plateau.leftEdge !== null) {
        el(svg, 'line', { x1: f.sx(plateau.leftEdge), x2: f.sx(plateau.leftEdge), y1: f.y1, y2: f.y0, stroke: '#059669', 'stroke-dasharray': '2 3' });
      }
      if (plateau.tenantShort && plateau.fairEdge !== null && (plateau.leftEdge === null || plateau.fairEdge < plateau.leftEdge)) {
        // Where the cap walks while a tenant is held below its share by its own demand.
        el(svg, 'line', { id: 'fair-edge', x1: f.sx(plateau.fairEdge), x2: f.sx(plateau.fairEdge), y1: f.y1, y2: f.y0, stroke: '#7c3aed', 'stroke-dasharray': '2 3' });
      }
    }
    if (pct !== null) {
      el(svg, 'line', { x1: f.x0, x2: f.x1, y1: sa(pct), y2: sa(pct), stroke: '#6b7280', 'stroke-dasharray': '4 4' });
      el(svg, 'text', Object.assign({ x: f.x0 + 4, y: sa(pct) - 4 }, HALO), 'required share ' + fmtPct(pct));
    }

    const predicted = levels.filter((l) => num(l.predicted_tpot_seconds) > 0 || g(l) > 0);
    if (!ctl) {
      el(svg, 'text', { x: (f.x0 + f.x1) / 2, y: (f.y0 + f.y1) / 2, 'text-anchor': 'middle', class: 'empty' },
        'No controller reports a model: the cap is static.');
    } else if (predicted.length === 0) {
      el(svg, 'text', { x: (f.x0 + f.x1) / 2, y: (f.y0 + f.y1) / 2, 'text-anchor': 'middle', class: 'empty' },
        'No model yet: the controller learns from the first streams.');
    }
    el(svg, 'path', { id: 'att-line', d: path(predicted.map((l) => [f.sx(l.running), num(l.predicted_attainment) === null ? null : sa(l.predicted_attainment)])),
      fill: 'none', stroke: '#c2410c', 'stroke-width': 2, 'stroke-dasharray': '6 4' });
    const line = el(svg, 'path', { id: 'goodput-line', d: path(predicted.map((l) => [f.sx(l.running), g(l) === null ? null : f.sy(g(l))])),
      fill: 'none', stroke: '#1d4ed8', 'stroke-width': 3 });
    line.setAttribute('data-points', String(predicted.length));
    for (const l of predicted) {
      const a = num(l.predicted_attainment);
      if (a !== null) {
        el(svg, 'circle', { cx: f.sx(l.running), cy: sa(a), r: 3.5, fill: l.meets_targets === true ? '#c2410c' : '#fff', stroke: '#c2410c', 'stroke-width': 1.5 });
      }
      if (g(l) !== null) el(svg, 'circle', { cx: f.sx(l.running), cy: f.sy(g(l)), r: 3, fill: '#1d4ed8', 'data-level': l.running });
    }
    for (const l of levels) {
      const m = mg(l);
      if (m !== null) {
        const w = Math.min(1, num(l.dwell_seconds) / 60);
        el(svg, 'circle', { cx: f.sx(l.running), cy: f.sy(m), r: 7, fill: '#1d4ed8', 'fill-opacity': (0.15 + 0.6 * w).toFixed(2), class: 'measured' });
      }
      const ma = num(l.measured_attainment);
      if (num(l.measured_requests) > 0 && ma !== null) {
        const x = f.sx(l.running), y = sa(ma);
        el(svg, 'path', { d: 'M' + x + ' ' + (y - 6) + 'l6 6l-6 6l-6 -6z', fill: 'none', stroke: '#c2410c', 'stroke-width': 1.5 });
      }
    }

    // The cap, and what runs now.
    if (cap !== null) {
      const x = f.sx(cap);
      const mk = el(svg, 'g', { id: 'cap-marker', 'data-cap': cap });
      el(mk, 'line', { x1: x, x2: x, y1: f.y1 - 4, y2: f.y0, stroke: '#111827', 'stroke-width': 2 });
      el(mk, 'text', Object.assign({ x: x - 6, y: f.y0 - 8, 'text-anchor': 'end', class: 'title' }, HALO), 'cap ' + cap);
    }
    const running = num(st.running);
    if (running !== null && running > 0) {
      const x = f.sx(Math.min(running, xMax + 0.5));
      el(svg, 'path', { d: 'M' + x + ' ' + (f.y0 - 1) + 'l-5 8h10z', fill: '#2563eb' });
    }
  }

  function validPlateau(p) {
    p = obj(p);
    if (!p) return null;
    const from = num(p.from), to = num(p.to);
    if (from === null || to === null || to < from || from < 0 || to > 1e6) return null;
    const level = (v) => (v !== null && v >= 0 && v <= 1e6 ? v : null);
    return { from: from, to: to, noise: num(p.noise), leftEdge: level(num(p.left_edge)), fairEdge: level(num(p.fair_edge)), tenantShort: p.tenant_short === true };
  }

  // The history charts. h holds columns (see /live/history).
  function timeChart(id, h, series, opts) {
    const svg = $(id);
    const t = h.t;
    const now = t.length ? t[t.length - 1] : Date.now() / 1000;
    const xs = [now - HISTORY_SPAN, now];
    let top = opts.min || 0;
    for (const s of series) for (const v of s.values) if (num(v) !== null) top = Math.max(top, v);
    if (opts.target) top = Math.max(top, opts.target * 1.1);
    if (opts.bars) {
      for (let i = 0; i < t.length; i++) {
        let sum = 0;
        for (const s of series) sum += num(s.values[i]) || 0;
        top = Math.max(top, sum);
      }
    }
    const yMax = opts.fixedMax || niceMax(top * 1.05);
    const W = 460, H = 190;
    const f = frame(svg, W, H, { l: 52, r: 8, t: 8, b: 34 }, xs, yMax, opts.fmt);
    for (const back of [600, 450, 300, 150, 0]) {
      el(svg, 'text', { x: f.sx(now - back), y: f.y0 + 14, 'text-anchor': back === 0 ? 'end' : 'middle' }, back === 0 ? 'now' : '−' + back / 60 + ' min');
    }
    if (opts.target) {
      el(svg, 'line', { x1: f.x0, x2: f.x1, y1: f.sy(opts.target), y2: f.sy(opts.target), stroke: '#b91c1c', 'stroke-dasharray': '5 4' });
      el(svg, 'text', Object.assign({ x: f.x1 - 2, y: f.sy(opts.target) - 4, 'text-anchor': 'end', fill: '#b91c1c' }, HALO), opts.targetLabel);
    }
    const bw = Math.max(1, (f.x1 - f.x0) / (HISTORY_SPAN / (h.interval || 2)) - 0.5);
    if (opts.bars) {
      for (let i = 0; i < t.length; i++) {
        let y = f.y0;
        for (const s of series) {
          const v = num(s.values[i]);
          if (!v) continue;
          const hgt = f.y0 - f.sy(v);
          el(svg, 'rect', { x: f.sx(t[i]) - bw, y: y - hgt, width: bw, height: hgt, fill: s.color });
          y -= hgt;
        }
      }
    } else {
      for (const s of series) {
        const pts = [];
        for (let i = 0; i < t.length; i++) {
          const v = num(s.values[i]);
          const x = f.sx(t[i]);
          if (s.step && i > 0 && v !== null && pts.length && pts[pts.length - 1][1] !== null) pts.push([x, pts[pts.length - 1][1]]);
          if (i > 0 && t[i] - t[i - 1] > 3 * (h.interval || 2)) pts.push([null, null]); // a gap: the gateway was away
          pts.push([x, v === null ? null : f.sy(v)]);
        }
        el(svg, 'path', { d: path(pts), fill: 'none', stroke: s.color, 'stroke-width': s.width || 1.8, 'stroke-dasharray': s.dash || null });
      }
    }
    let lx = f.x0 + 6;
    for (const s of series) {
      if (opts.bars && !s.values.some((v) => v > 0)) continue;
      el(svg, 'rect', { x: lx, y: f.y1 + 2, width: 10, height: 10, fill: s.color });
      el(svg, 'text', { x: lx + 14, y: f.y1 + 11 }, s.label);
      lx += 22 + 6.5 * s.label.length;
    }
    if (!t.length) el(svg, 'text', { x: (f.x0 + f.x1) / 2, y: (f.y0 + f.y1) / 2, 'text-anchor': 'middle', class: 'empty' }, 'no samples yet');
  }

  function drawHistory(h, st) {
    const targets = obj(st && st.targets) || {};
    const ctl = obj(st && st.controller);
    const perSec = (xs) => xs.map((v) => (num(v) === null ? null : v / (h.interval || 2)));
    timeChart('h-conc', h, [
      { label: 'cap', values: h.limit, color: '#111827', step: true, width: 2.5 },
      { label: 'running', values: h.running, color: '#2563eb' },
      { label: 'queued', values: h.queued, color: '#d97706' },
    ], { fmt: (v) => fmtNum(v, 0), min: 2 });
    timeChart('h-goodput', h, [{ label: 'goodput', values: h.goodput, color: '#1d4ed8', width: 2.5 }], { fmt: (v) => fmtNum(v) });
    const reasons = Object.keys(REASON_COLORS);
    timeChart('h-refused', h, reasons.map((r) => ({ label: r, values: perSec(arr(h.refused[r])), color: REASON_COLORS[r] })),
      { fmt: (v) => fmtNum(v), bars: true });
    timeChart('h-att', h, [{ label: 'attainment', values: h.attainment, color: '#c2410c', width: 2.5 }],
      { fmt: fmtPct, fixedMax: 1, target: num(ctl && ctl.percentile), targetLabel: 'required ' + fmtPct(ctl && ctl.percentile) });
    for (const [id, key, target] of [['h-ttft', 'ttft', targets.ttft_seconds], ['h-tpot', 'tpot', targets.tpot_seconds]]) {
      const q = arr(h[key]);
      timeChart(id, h, [
        { label: 'P50', values: arr(q[0]), color: '#93c5fd' },
        { label: 'P90', values: arr(q[1]), color: '#2563eb', width: 2.5 },
        { label: 'P99', values: arr(q[2]), color: '#1e3a8a' },
      ], { fmt: fmtDur, target: num(target) > 0 ? target : null, targetLabel: 'target ' + fmtDur(target) });
    }
  }

  // The tiles along the top.
  function drawTiles(st) {
    const box = $('tiles');
    clear(box);
    const w = obj(st.window) || {};
    const ctl = obj(st.controller);
    const t = obj(st.targets) || {};
    const q = (x) => obj(x) || {};
    const tile = (label, value, sub, cls) => {
      const d = html(box, 'div', null, 'tile' + (cls ? ' ' + cls : ''));
      html(d, 'div', label, 'l');
      html(d, 'div', value, 'v');
      if (sub) html(d, 'div', sub, 's');
    };
    const vs = (p, target) => (num(target) > 0 && num(p) !== null ? (p <= target ? 'good' : 'bad') : '');
    tile('cap', fmtInt(st.limit), st.adaptive ? 'adaptive' : 'static', '');
    tile('running', fmtInt(st.running), ctl && num(ctl.prefill_limit) > 0 ? 'prefills at once ≤ ' + ctl.prefill_limit : '');
    tile('queued', fmtInt(st.queued), 'demand ' + fmtNum(st.demand_ratio) + ' × cap');
    tile('goodput', fmtNum(w.goodput_requests_per_second), 'req/s over ' + fmtDur(w.seconds));
    tile('attainment', fmtPct(w.attainment_ratio), fmtInt(w.good) + ' good of ' + fmtInt((w.good || 0) + (w.missed || 0) + (w.rejected || 0) + (w.engine_errors || 0)),
      ctl && num(w.attainment_ratio) !== null && num(ctl.percentile) !== null ? (w.attainment_ratio >= ctl.percentile ? 'good' : 'bad') : '');
    tile('refused', fmtNum(w.rejections_per_second), 'per second');
    tile('TTFT P90', fmtDur(q(w.ttft).p90_seconds), 'target ' + fmtDur(t.ttft_seconds), vs(q(w.ttft).p90_seconds, t.ttft_seconds));
    tile('TPOT P90', fmtDur(q(w.tpot).p90_seconds), 'target ' + fmtDur(t.tpot_seconds), vs(q(w.tpot).p90_seconds, t.tpot_seconds));
    tile('throughput', fmtNum(w.output_tokens_per_second, 0), 'output tokens/s');
  }

  function row(table, cells, head) {
    const tr = html(table, 'tr');
    for (const c of cells) html(tr, head ? 'th' : 'td', c);
  }

  function drawTokens(st) {
    const tb = $('tokens');
    clear(tb);
    const ctl = obj(st.controller);
    const tk = obj(ctl && ctl.tokens);
    const adm = obj(st.admission) || {};
    if (tk) {
      row(tb, ['token budget', tk.budget === true ? 'on' : 'off (requests only)']);
      row(tb, ['prefill', num(tk.prefill_seconds_per_token) > 0
        ? fmtDur(tk.prefill_base_seconds) + ' + ' + fmtNum(tk.prefill_steps) + ' steps + ' + fmtDur(tk.prefill_seconds_per_token) + ' per prompt token'
        : 'not learned yet']);
      row(tb, ['decode step', num(tk.step_base_seconds) > 0
        ? fmtDur(tk.step_base_seconds) + ' + ' + fmtDur(tk.step_per_running_seconds) + ' per running + ' + fmtDur(tk.step_per_kv_token_seconds) + ' per KV token'
        : 'not learned yet']);
      row(tb, ['longest step the TPOT target allows', num(tk.step_limit_seconds) > 0 ? fmtDur(tk.step_limit_seconds) : 'no step budget']);
      row(tb, ['mean prompt / output', fmtInt(tk.mean_prompt_tokens) + ' / ' + fmtInt(tk.mean_output_tokens) + ' tokens']);
      if (num(tk.longest_prompt_meeting_ttft) > 0) row(tb, ['longest prompt meeting TTFT alone', fmtInt(tk.longest_prompt_meeting_ttft) + ' tokens']);
      row(tb, ['KV the engine holds beyond the running', fmtInt(tk.hidden_kv_tokens) + ' tokens']);
    } else {
      row(tb, ['token model', 'none (no controller reports one)']);
    }
    row(tb, ['prefill under way', fmtInt(adm.prefill_tokens) + ' prompt tokens']);
    row(tb, ['KV of the running requests', fmtInt(adm.kv_tokens) + ' tokens']);
    const held = obj(adm.held);
    if (held) {
      row(tb, ['requests held, by reason', Object.keys(held).map((k) => k.toLowerCase() + ' ' + fmtInt(held[k])).join(', ')]);
    }
    const em = obj(st.engine_metrics) || {};
    const rd = obj(em.reading);
    const ratio = rd ? num(rd.kv_usage_ratio) : null;
    $('kvfill').style.width = ratio === null ? '0' : Math.max(0, Math.min(100, 100 * ratio)).toFixed(1) + '%';
    let txt = 'Engine KV cache (its own metrics): ' + (typeof em.state === 'string' ? em.state : 'unknown');
    if (rd) {
      txt += ' · ' + (ratio === null ? 'usage unknown' : fmtPct(ratio) + ' in use') + ' · ' + fmtInt(rd.kv_tokens) + ' of ' + fmtInt(rd.kv_capacity_tokens) +
        ' tokens · running ' + fmtInt(rd.running) + ', waiting ' + fmtInt(rd.waiting) + ' · read ' + fmtDur(rd.age_seconds) + ' ago';
    }
    $('kvtext').textContent = txt;
  }

  function drawClasses(st) {
    const ct = $('classes');
    clear(ct);
    row(ct, ['class', 'running', 'queued', 'granted', 'shed'], true);
    for (const c of arr(st.classes)) {
      if (!obj(c)) continue;
      row(ct, [String(c.name), fmtInt(c.running), fmtInt(c.queued), fmtInt(c.granted), fmtInt(c.shed)]);
    }
    const tt = $('tenants');
    clear(tt);
    row(tt, ['tenant', 'class', 'running', 'queued', 'granted', 'served tokens'], true);
    for (const t of arr(st.tenants)) {
      if (!obj(t)) continue;
      row(tt, [typeof t.tenant === 'string' && t.tenant ? t.tenant : '(no tenant)', t.class ? String(t.class) : '', fmtInt(t.running), fmtInt(t.queued), fmtInt(t.granted), fmtInt(t.served_tokens)]);
    }
  }

  function drawHeader(st) {
    const ctl = obj(st.controller);
    let mode = st.adaptive ? 'adaptive cap' : 'static cap';
    if (ctl && ctl.learning === true) mode += ', learning';
    const ramp = ctl && obj(ctl.ramp);
    if (ramp && ramp.on === true) {
      mode += ', ramping' + (Number.isFinite(ramp.toward) && ramp.toward > 0 ? ' toward ' + fmtInt(ramp.toward) : '') +
        ' (cost so far: ' + fmtInt(ramp.refused) + ' refused, ' + fmtNum(ramp.idle_slot_seconds) + ' idle slot-seconds)';
    }
    if (st.draining) mode += ', draining';
    $('mode').textContent = mode;
    let reason = '';
    if (ctl && typeof ctl.reason === 'string' && ctl.reason) {
      reason = 'Why the cap last changed: ' + ctl.reason;
      const at = typeof ctl.changed_at === 'string' ? Date.parse(ctl.changed_at) : NaN;
      if (Number.isFinite(at)) reason += ' (' + fmtDur(Math.max(0, (Date.now() - at) / 1000)) + ' ago)';
    }
    $('reason').textContent = reason;
  }

  // Polling. A failed poll marks the page stale and tries again; it never
  // throws.
  let status = null;
  let hist = { interval: 2, next: -1, t: [], limit: [], running: [], queued: [], goodput: [], attainment: [], ttft: [[], [], []], tpot: [[], [], []], refused: {} };
  let lastOK = 0;

  async function getJSON(url) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), 5000);
    try {
      const r = await fetch(url, { cache: 'no-store', signal: ctl.signal });
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return await r.json();
    } finally {
      clearTimeout(timer);
    }
  }

  function mergeHistory(h) {
    if (!obj(h) || !Array.isArray(h.t)) return;
    const cols = ['t', 'limit', 'running', 'queued', 'goodput', 'attainment'];
    const fresh = h.first !== hist.next;
    if (fresh) {
      hist = { interval: num(h.interval_seconds) || 2, next: 0, refused: {}, ttft: [[], [], []], tpot: [[], [], []] };
      for (const c of cols) hist[c] = [];
    }
    for (const c of cols) hist[c] = hist[c].concat(arr(h[c]));
    for (let q = 0; q < 3; q++) {
      hist.ttft[q] = hist.ttft[q].concat(arr(arr(h.ttft)[q]));
      hist.tpot[q] = hist.tpot[q].concat(arr(arr(h.tpot)[q]));
    }
    const rf = obj(h.refused) || {};
    for (const r of Object.keys(REASON_COLORS)) hist.refused[r] = arr(hist.refused[r]).concat(arr(rf[r]));
    hist.next = num(h.next) !== null ? h.next : -1;
    // Keep the span drawn.
    const keep = Math.ceil(HISTORY_SPAN / hist.interval) + 1;
    const cut = Math.max(0, hist.t.length - keep);
    if (cut > 0) {
      for (const c of cols) hist[c] = hist[c].slice(cut);
      for (let q = 0; q < 3; q++) {
        hist.ttft[q] = hist.ttft[q].slice(cut);
        hist.tpot[q] = hist.tpot[q].slice(cut);
      }
      for (const r of Object.keys(hist.refused)) hist.refused[r] = hist.refused[r].slice(cut);
    }
  }

  function setConn(ok, text) {
    const c = $('conn');
    c.textContent = text;
    c.classList.toggle('down', !ok);
  }

  async function pollStatus() {
    try {
      const st = await getJSON('status');
      if (!obj(st)) throw new Error('not an object');
      status = st;
      lastOK = Date.now();
      drawHeader(st);
      drawTiles(st);
      drawCurve(st);
      drawTokens(st);
      drawClasses(st);
      drawHistory(hist, st);
      setConn(true, 'live · ' + new Date().toLocaleTimeString('en-GB'));
    } catch (e) {
      setConn(false, 'no answer from the gateway' + (lastOK ? ' since ' + new Date(lastOK).toLocaleTimeString('en-GB') : '') + '; retrying');
    }
    setTimeout(pollStatus, STATUS_EVERY);
  }

  async function pollHistory() {
    try {
      const url = hist.next >= 0 ? 'live/history?since=' + encodeURIComponent(String(hist.next)) : 'live/history';
      mergeHistory(await getJSON(url));
      if (status) drawHistory(hist, status);
    } catch (e) {
      // The status poll says so.
    }
    setTimeout(pollHistory, 1000 * (hist.interval || 2));
  }

  pollStatus();
  pollHistory();
})();
