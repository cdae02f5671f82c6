// A form generated from a tool's inputSchema (JSON Schema): strings,
// numbers, integers, booleans, enums, arrays and nested objects get
// controls of their own; anything else, and the whole object on demand,
// is raw JSON. read() turns the form back into the arguments object.

import { h } from "./lib.js";

let seq = 0;

export function schemaForm(schema) {
  const root = build(schema || { type: "object" }, "arguments", true);
  const raw = h("textarea", { id: "raw-args", "aria-label": "Arguments as JSON" });
  const rawBox = h("div", { hidden: true }, h("label", {}, "Arguments (JSON)", raw));
  const toggle = h("label", { class: "check" }, h("input", { type: "checkbox", id: "raw-toggle" }), "Edit as raw JSON");
  const cb = toggle.querySelector("input");
  cb.addEventListener("change", () => {
    if (cb.checked) {
      try { raw.value = JSON.stringify(root.read() ?? {}, null, 2); } catch { raw.value = "{}"; }
    }
    rawBox.hidden = !cb.checked;
    root.el.hidden = cb.checked;
  });
  return {
    el: h("div", {}, root.el, toggle, rawBox),
    read() {
      if (cb.checked) return JSON.parse(raw.value || "{}");
      return root.read() ?? {};
    },
  };
}

function typeOf(s) {
  if (Array.isArray(s.type)) return s.type.find(t => t !== "null") || "string";
  if (s.type) return s.type;
  if (s.properties) return "object";
  if (s.enum) return "enum";
  return "json";
}

// build returns {el, read} for schema s named name.
function build(s, name, top = false, required = false) {
  const id = "f" + (++seq);
  const label = (s.title || name) + (required ? " (required)" : "");
  const hint = s.description ? h("span", { class: "muted" }, " " + s.description) : null;
  if (s.enum) {
    const sel = h("select", { id, name }, h("option", { value: "" }, "(none)"), s.enum.map(v => h("option", { value: JSON.stringify(v) }, String(v))));
    if (s.default !== undefined) sel.value = JSON.stringify(s.default);
    return { el: h("label", { for: id }, label, hint, sel), read: () => sel.value === "" ? undefined : JSON.parse(sel.value) };
  }
  switch (typeOf(s)) {
    case "object": {
      const props = s.properties || {};
      const req = new Set(s.required || []);
      const parts = Object.entries(props).map(([k, ps]) => [k, build(ps, k, false, req.has(k))]);
      const body = parts.map(([, p]) => p.el);
      let extra = null;
      if (!Object.keys(props).length && (!top || s.additionalProperties !== false)) {
        extra = build({ type: "json" }, name);
        body.push(extra.el);
      }
      const el = top ? h("div", { class: "fields" }, body) : h("fieldset", {}, h("legend", {}, label), hint, body);
      return {
        el, read() {
          if (extra) return extra.read();
          const out = {};
          for (const [k, p] of parts) { const v = p.read(); if (v !== undefined) out[k] = v; }
          return Object.keys(out).length || top ? out : undefined;
        },
      };
    }
    case "array": {
      const items = s.items || { type: "string" };
      const list = h("div", {});
      const rows = [];
      const add = () => {
        const p = build(items, `${name} item ${rows.length + 1}`);
        const row = h("div", { class: "row" }, p.el);
        const rm = h("button", { type: "button", class: "secondary", "aria-label": `Remove ${name} item` }, "Remove");
        rm.addEventListener("click", () => { rows.splice(rows.indexOf(p), 1); row.remove(); });
        row.append(rm);
        rows.push(p);
        list.append(row);
      };
      const addB = h("button", { type: "button", class: "secondary", "data-add": name }, `Add ${name} item`);
      addB.addEventListener("click", add);
      return {
        el: h("fieldset", {}, h("legend", {}, label), hint, list, addB),
        read() { const v = rows.map(p => p.read()).filter(x => x !== undefined); return v.length ? v : undefined; },
      };
    }
    case "boolean": {
      const cb = h("input", { type: "checkbox", id, name });
      if (s.default === true) cb.checked = true;
      let touched = false;
      cb.addEventListener("change", () => { touched = true; });
      return { el: h("label", { class: "check", for: id }, cb, label, hint), read: () => (touched || s.default !== undefined) ? cb.checked : undefined };
    }
    case "number":
    case "integer": {
      const inp = h("input", { type: "number", id, name, step: typeOf(s) === "integer" ? "1" : "any", min: s.minimum, max: s.maximum });
      if (s.default !== undefined) inp.value = s.default;
      return {
        el: h("label", { for: id }, label, hint, inp),
        read() {
          if (inp.value === "") return undefined;
          const n = Number(inp.value);
          if (Number.isNaN(n)) throw new Error(`${name}: not a number`);
          return n;
        },
      };
    }
    case "string": {
      const inp = h("input", { type: "text", id, name });
      if (s.default !== undefined) inp.value = s.default;
      return { el: h("label", { for: id }, label, hint, inp), read: () => inp.value === "" ? undefined : inp.value };
    }
    default: {
      const ta = h("textarea", { id, name });
      return {
        el: h("label", { for: id }, `${label} (JSON)`, hint, ta),
        read() { return ta.value.trim() === "" ? undefined : JSON.parse(ta.value); },
      };
    }
  }
}
