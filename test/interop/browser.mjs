// A minimal "browser" for Node tests of login flows: a cookie jar (RFC 6265
// matching by host and path, as browsers do, so two servers on one loopback
// address share cookies whatever their ports), redirects followed by hand
// (fetch redirect: 'manual') until a Location starts with a given prefix —
// the OAuth client's redirect_uri, which is returned and not fetched — and
// HTML forms: a page's <form>s are parsed (action, method, named inputs,
// selects, textareas, submit buttons) and one is submitted with given
// values, url-encoded, as a person pressing its first button would — or
// the button given by name and value (press), on whichever form has it.
//
//   import { Browser } from "./browser.mjs";
//   const b = new Browser();
//   const redirect = await b.authorize(authorizeURL, {
//     stopAt: "http://127.0.0.1:9/callback",
//     fields: { login: "alice", password: "pw" },
//   }); // login page, consent page, ... then the redirect_uri with ?code=&state=
//
//   // a page with several forms or buttons: press the one named so
//   await b.authorize(url, { stopAt, press: [{ name: "decision", value: "approve" }] });
//
// Step by step: b.navigate(url, {stopAt}) -> NavResult; b.submit(result,
// values, {stopAt, button}) -> NavResult; parseForm(html, baseURL) -> Form
// (the first), parseForms(html, baseURL) -> Form[] (all of them).

/**
 * What a navigation ended on.
 * @typedef {object} NavResult
 * @property {boolean} stopped  true when a redirect to the stopAt prefix ended it
 * @property {string} url       the final URL: the page's, or the stopAt Location
 * @property {number} status    the last response's status
 * @property {Headers} headers  the last response's headers
 * @property {string} body      the last response's body ("" when stopped)
 * @property {string[]} history every URL requested, in order, then the stop URL
 */

/**
 * A parsed HTML form.
 * @typedef {object} Form
 * @property {string} action   absolute URL the form submits to
 * @property {string} method   "GET" or "POST"
 * @property {string} enctype  the form's enctype attribute (only url-encoding is sent)
 * @property {[string, string][]} fields  name/value pairs a submission sends by default, in order
 * @property {Set<string>} names  every named control (including unchecked boxes and other buttons)
 * @property {{name: string, value: string}[]} buttons  the named submit buttons, in order
 * @property {number} submitter  index in fields of the default (first) button's pair; -1 when it sends none
 */

const ENTITIES = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'", nbsp: "\u00a0" };

/** Decodes HTML character references (named basics, decimal, hex). */
export function decodeEntities(s) {
  return s.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z]+);/gi, (m, e) => {
    if (e[0] === "#") {
      const n = e[1] === "x" || e[1] === "X" ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10);
      return Number.isFinite(n) ? String.fromCodePoint(n) : m;
    }
    return ENTITIES[e.toLowerCase()] ?? m;
  });
}

/** The attributes of one start tag's text (after the tag name) as a Map, names lowercased. */
function parseAttrs(s) {
  const attrs = new Map();
  const re = /([^\s"'>\/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?/g;
  let m;
  while ((m = re.exec(s))) {
    const name = m[1].toLowerCase();
    if (!attrs.has(name)) attrs.set(name, decodeEntities(m[2] ?? m[3] ?? m[4] ?? ""));
  }
  return attrs;
}

/**
 * Parses the first <form> of an HTML page.
 * @param {string} html     the page
 * @param {string} baseURL  the page's URL, against which the action resolves
 * @returns {Form|null}     null when the page has no form
 */
export function parseForm(html, baseURL) {
  return parseForms(html, baseURL)[0] ?? null;
}

/**
 * Parses every <form> of an HTML page, in document order (forms do not
 * nest in HTML; a form without its end tag runs to the end of the page).
 * @param {string} html
 * @param {string} baseURL
 * @returns {Form[]}
 */
export function parseForms(html, baseURL) {
  let base = baseURL;
  const baseTag = /<base\b([^>]*)>/i.exec(html);
  if (baseTag) {
    const href = parseAttrs(baseTag[1]).get("href");
    if (href) base = new URL(href, baseURL).href;
  }
  const forms = [];
  const startRE = /<form\b([^>]*)>/gi;
  let start;
  while ((start = startRE.exec(html))) {
    const rest = html.slice(start.index + start[0].length);
    const end = /<\/form\s*>/i.exec(rest);
    const inner = end ? rest.slice(0, end.index) : rest;
    forms.push(parseOneForm(start[1], inner, baseURL, base));
    if (!end) break;
    startRE.lastIndex = start.index + start[0].length + end.index + end[0].length;
  }
  return forms;
}

/** One form: its start tag's attribute text and its inner HTML. */
function parseOneForm(startAttrs, inner, baseURL, base) {
  const fattrs = parseAttrs(startAttrs);
  const action = new URL(fattrs.get("action") || baseURL, fattrs.get("action") ? base : undefined).href;
  const method = (fattrs.get("method") || "GET").toUpperCase() === "POST" ? "POST" : "GET";
  const enctype = fattrs.get("enctype") || "application/x-www-form-urlencoded";

  const fields = [];
  const names = new Set();
  const buttons = [];
  let submitter = false;
  let submitterIndex = -1;
  const re = /<(input|button|select|textarea)\b([^>]*)>/gi;
  let m;
  while ((m = re.exec(inner))) {
    const tag = m[1].toLowerCase();
    const a = parseAttrs(m[2]);
    const name = a.get("name");
    const disabled = a.has("disabled");
    let closeIdx = -1;
    let content = "";
    if (tag !== "input") {
      const close = new RegExp(`</${tag}\\s*>`, "i").exec(inner.slice(re.lastIndex));
      if (close) {
        closeIdx = re.lastIndex + close.index;
        content = inner.slice(re.lastIndex, closeIdx);
        re.lastIndex = closeIdx + close[0].length;
      }
    }
    if (!name) {
      if ((tag === "button" && (a.get("type") ?? "submit").toLowerCase() === "submit") || (tag === "input" && /^(submit|image)$/i.test(a.get("type") ?? ""))) {
        submitter = true; // an unnamed first button sends nothing
      }
      continue;
    }
    names.add(name);
    if (disabled) continue;
    switch (tag) {
      case "input": {
        const type = (a.get("type") || "text").toLowerCase();
        if (type === "submit" || type === "image") {
          buttons.push({ name, value: a.get("value") ?? "" });
          if (!submitter) {
            submitter = true;
            submitterIndex = fields.length;
            fields.push([name, a.get("value") ?? ""]);
          }
        } else if (type === "checkbox" || type === "radio") {
          if (a.has("checked")) fields.push([name, a.get("value") ?? "on"]);
        } else if (type !== "button" && type !== "reset" && type !== "file") {
          fields.push([name, a.get("value") ?? ""]);
        }
        break;
      }
      case "button": {
        const type = (a.get("type") || "submit").toLowerCase();
        if (type === "submit") {
          buttons.push({ name, value: a.get("value") ?? "" });
          if (!submitter) {
            submitter = true;
            submitterIndex = fields.length;
            fields.push([name, a.get("value") ?? ""]);
          }
        }
        break;
      }
      case "textarea":
        fields.push([name, decodeEntities(content.replace(/^\r?\n/, ""))]);
        break;
      case "select": {
        const opts = [...content.matchAll(/<option\b([^>]*)>([^<]*)/gi)].map((o) => {
          const oa = parseAttrs(o[1]);
          return { value: oa.get("value") ?? decodeEntities(o[2]).trim(), selected: oa.has("selected") };
        });
        const chosen = opts.find((o) => o.selected) ?? opts[0];
        if (chosen) fields.push([name, chosen.value]);
        break;
      }
    }
  }
  return { action, method, enctype, fields, names, buttons, submitter: submitterIndex };
}

/** Whether form has a submit button called name with value. */
function hasButton(form, { name, value }) {
  return form.buttons.some((b) => b.name === name && b.value === value);
}

/** A cookie jar: RFC 6265 storage and matching, enough for test servers. */
export class CookieJar {
  /** @type {{name: string, value: string, domain: string, hostOnly: boolean, path: string, secure: boolean, expires: number}[]} */
  cookies = [];

  /**
   * Stores the Set-Cookie header values of a response to url.
   * @param {string|URL} url
   * @param {string[]} setCookies
   */
  store(url, setCookies) {
    const u = new URL(url);
    const host = u.hostname.toLowerCase();
    for (const line of setCookies) {
      const [pair, ...attrs] = line.split(";");
      const eq = pair.indexOf("=");
      if (eq <= 0) continue;
      const c = {
        name: pair.slice(0, eq).trim(),
        value: pair.slice(eq + 1).trim(),
        domain: host,
        hostOnly: true,
        path: defaultPath(u.pathname),
        secure: false,
        expires: Infinity,
      };
      for (const attr of attrs) {
        const i = attr.indexOf("=");
        const k = (i < 0 ? attr : attr.slice(0, i)).trim().toLowerCase();
        const v = i < 0 ? "" : attr.slice(i + 1).trim();
        if (k === "path" && v.startsWith("/")) c.path = v;
        else if (k === "domain" && v) {
          const d = v.replace(/^\./, "").toLowerCase();
          if (host !== d && !host.endsWith(`.${d}`)) continue; // a foreign domain: ignored
          c.domain = d;
          c.hostOnly = false;
        } else if (k === "secure") c.secure = true;
        else if (k === "max-age" && /^-?\d+$/.test(v)) c.maxAge = Number(v);
        else if (k === "expires" && c.maxAge === undefined) {
          const t = Date.parse(v);
          if (!Number.isNaN(t)) c.expires = t;
        }
      }
      if (c.maxAge !== undefined) c.expires = c.maxAge <= 0 ? 0 : Date.now() + c.maxAge * 1000;
      delete c.maxAge;
      this.cookies = this.cookies.filter((o) => !(o.name === c.name && o.domain === c.domain && o.path === c.path));
      if (c.expires > Date.now()) this.cookies.push(c);
    }
  }

  /**
   * The Cookie header value for a request to url ("" for none): longer
   * paths first, as browsers send them.
   * @param {string|URL} url
   * @returns {string}
   */
  header(url) {
    const u = new URL(url);
    const host = u.hostname.toLowerCase();
    const now = Date.now();
    this.cookies = this.cookies.filter((c) => c.expires > now);
    return this.cookies
      .filter(
        (c) =>
          (c.hostOnly ? host === c.domain : host === c.domain || host.endsWith(`.${c.domain}`)) &&
          pathMatch(u.pathname, c.path) &&
          (!c.secure || u.protocol === "https:" || host === "127.0.0.1" || host === "localhost" || host === "[::1]"),
      )
      .sort((a, b) => b.path.length - a.path.length)
      .map((c) => `${c.name}=${c.value}`)
      .join("; ");
  }

  /**
   * The value of the cookie called name that a request to url would send.
   * @param {string|URL} url
   * @param {string} name
   * @returns {string|undefined}
   */
  get(url, name) {
    for (const part of this.header(url).split("; ")) {
      const i = part.indexOf("=");
      if (i > 0 && part.slice(0, i) === name) return part.slice(i + 1);
    }
    return undefined;
  }
}

function defaultPath(p) {
  if (!p.startsWith("/") || p.lastIndexOf("/") === 0) return "/";
  return p.slice(0, p.lastIndexOf("/"));
}

function pathMatch(reqPath, cookiePath) {
  if (reqPath === cookiePath) return true;
  if (!reqPath.startsWith(cookiePath)) return false;
  return cookiePath.endsWith("/") || reqPath[cookiePath.length] === "/";
}

/** A browser: one cookie jar, redirects by hand, forms. */
export class Browser {
  /**
   * @param {object} [opts]
   * @param {CookieJar} [opts.jar]          share a jar between browsers
   * @param {number} [opts.maxRedirects=20]  per navigation
   * @param {number} [opts.timeoutMs=10000]  per request
   * @param {string} [opts.userAgent]
   */
  constructor({ jar = new CookieJar(), maxRedirects = 20, timeoutMs = 10_000, userAgent = "mcpgate-test-browser/1" } = {}) {
    this.jar = jar;
    this.maxRedirects = maxRedirects;
    this.timeoutMs = timeoutMs;
    this.userAgent = userAgent;
  }

  /**
   * One request, no redirect followed; cookies sent and stored.
   * @param {string|URL} url
   * @param {RequestInit} [init]
   * @returns {Promise<Response>}
   */
  async request(url, init = {}) {
    const headers = new Headers(init.headers);
    const cookie = this.jar.header(url);
    if (cookie) headers.set("cookie", cookie);
    if (!headers.has("user-agent")) headers.set("user-agent", this.userAgent);
    if (!headers.has("accept")) headers.set("accept", "text/html,application/xhtml+xml,*/*;q=0.8");
    const res = await fetch(url, {
      ...init,
      headers,
      redirect: "manual",
      signal: init.signal ?? AbortSignal.timeout(this.timeoutMs),
    });
    this.jar.store(url, res.headers.getSetCookie());
    return res;
  }

  /**
   * Requests url and follows redirects (301/302/303 turn into GET, 307/308
   * keep method and body) until a page, or until a Location that starts
   * with stopAt, which is returned without being fetched.
   * @param {string|URL} url
   * @param {object} [opts]
   * @param {string} [opts.stopAt]   a URL prefix, e.g. the client's redirect_uri
   * @param {string} [opts.method="GET"]
   * @param {BodyInit} [opts.body]
   * @param {HeadersInit} [opts.headers]
   * @returns {Promise<NavResult>}
   */
  async navigate(url, { stopAt, method = "GET", body, headers } = {}) {
    let current = new URL(url).href;
    const history = [];
    if (stopAt && current.startsWith(stopAt)) {
      return { stopped: true, url: current, status: 0, headers: new Headers(), body: "", history: [current] };
    }
    for (let hop = 0; ; hop++) {
      history.push(current);
      const res = await this.request(current, { method, body, headers });
      const loc = res.headers.get("location");
      if (res.status >= 300 && res.status < 400 && loc) {
        await res.arrayBuffer();
        if (hop >= this.maxRedirects) throw new Error(`more than ${this.maxRedirects} redirects: ${history.join(" -> ")}`);
        const next = new URL(loc, current).href;
        if (stopAt && next.startsWith(stopAt)) {
          history.push(next);
          return { stopped: true, url: next, status: res.status, headers: res.headers, body: "", history };
        }
        if (res.status !== 307 && res.status !== 308) {
          method = "GET";
          body = undefined;
          headers = undefined;
        }
        current = next;
        continue;
      }
      return { stopped: false, url: current, status: res.status, headers: res.headers, body: await res.text(), history };
    }
  }

  /**
   * Submits the first form of a page (a NavResult, or {url, body}) with its
   * default values overridden by values, then follows redirects as
   * navigate does. With button, the first form that has that submit button
   * is submitted by pressing it.
   * @param {{url: string, body: string}} page
   * @param {Record<string, string>} [values]  field name -> value
   * @param {object} [opts]
   * @param {string} [opts.stopAt]
   * @param {boolean} [opts.strict=true]  throw when values names a field the form does not have
   * @param {{name: string, value: string}} [opts.button]  the submit button to press
   * @returns {Promise<NavResult>}
   */
  async submit(page, values = {}, { stopAt, strict = true, button } = {}) {
    const forms = parseForms(page.body, page.url);
    const form = button ? forms.find((f) => hasButton(f, button)) : forms[0];
    if (!form) {
      const what = button ? `a <form> with a button ${button.name}=${button.value}` : "<form>";
      throw new Error(`no ${what} on ${page.url}:\n${snippet(page.body)}`);
    }
    return this.submitForm(form, values, { stopAt, strict, button });
  }

  /**
   * Submits a parsed form (see parseForm) with values, then follows
   * redirects. The form's first submit button is the one pressed, unless
   * button names another of its buttons: then that one's name and value
   * are sent instead, as a browser sends only the button pressed.
   * @param {Form} form
   * @param {Record<string, string>} [values]
   * @param {object} [opts]
   * @param {string} [opts.stopAt]
   * @param {boolean} [opts.strict=true]
   * @param {{name: string, value: string}} [opts.button]
   * @returns {Promise<NavResult>}
   */
  async submitForm(form, values = {}, { stopAt, strict = true, button } = {}) {
    let fields = form.fields;
    if (button) {
      if (!hasButton(form, button)) {
        const has = form.buttons.map((b) => `${b.name}=${b.value}`).join(", ") || "none";
        throw new Error(`form ${form.method} ${form.action} has no submit button ${button.name}=${button.value} (has: ${has})`);
      }
      fields = form.fields.slice();
      const pair = [button.name, button.value];
      if (form.submitter >= 0) fields[form.submitter] = pair;
      else fields.push(pair);
    }
    const params = new URLSearchParams();
    const given = new Map(Object.entries(values));
    for (const [k, v] of fields) {
      if (given.has(k)) {
        params.append(k, String(given.get(k)));
        given.delete(k);
      } else {
        params.append(k, v);
      }
    }
    for (const [k, v] of given) {
      if (strict && !form.names.has(k)) {
        throw new Error(`form ${form.method} ${form.action} has no field ${k} (has: ${[...form.names].join(", ")})`);
      }
      params.append(k, String(v));
    }
    if (form.method === "GET") {
      const u = new URL(form.action);
      u.search = params.toString();
      return this.navigate(u.href, { stopAt });
    }
    return this.navigate(form.action, {
      stopAt,
      method: "POST",
      body: params.toString(),
      headers: { "content-type": "application/x-www-form-urlencoded" },
    });
  }

  /**
   * Runs an interactive authorization: navigates to url, then submits a
   * form of every page it lands on — filling in the fields of fields that
   * form has (e.g. login and password on a login page; a consent page is
   * submitted as it is) — until a redirect to stopAt, whose URL it
   * returns. The form submitted is the first one, unless a form of the
   * page has a submit button listed in press: then the first such form,
   * by pressing that button (the first of press that it has). Throws on
   * a page with no form, an HTTP error page, or after maxForms forms.
   * @param {string|URL} url  the authorization request
   * @param {object} opts
   * @param {string} opts.stopAt  the redirect_uri (a prefix)
   * @param {Record<string, string>} [opts.fields]
   * @param {{name: string, value: string}[]} [opts.press]  buttons to press where a page has them
   * @param {number} [opts.maxForms=5]
   * @param {(page: NavResult) => void} [opts.onPage]  sees every page before its form is submitted
   * @param {(nav: NavResult) => void} [opts.onNavigation]  sees every navigation's result, the last (stopped) one too
   * @returns {Promise<string>}
   */
  async authorize(url, { stopAt, fields = {}, press = [], maxForms = 5, onPage, onNavigation } = {}) {
    if (!stopAt) throw new Error("authorize needs stopAt (the redirect_uri)");
    let r = await this.navigate(url, { stopAt });
    onNavigation?.(r);
    for (let n = 0; !r.stopped; n++) {
      if (r.status >= 400) throw new Error(`HTTP ${r.status} at ${r.url}:\n${snippet(r.body)}`);
      if (n >= maxForms) throw new Error(`still no redirect to ${stopAt} after ${maxForms} forms; at ${r.url}`);
      onPage?.(r);
      const forms = parseForms(r.body, r.url);
      let form = forms[0];
      let button;
      for (const f of forms) {
        button = press.find((b) => hasButton(f, b));
        if (button) {
          form = f;
          break;
        }
      }
      if (!form) throw new Error(`no <form> on ${r.url} (status ${r.status}):\n${snippet(r.body)}`);
      const values = Object.fromEntries(Object.entries(fields).filter(([k]) => form.names.has(k)));
      r = await this.submitForm(form, values, { stopAt, button });
      onNavigation?.(r);
    }
    return r.url;
  }
}

function snippet(body) {
  const text = body.replace(/<style[\s\S]*?<\/style>/gi, "").replace(/<[^>]+>/g, " ").replace(/\s+/g, " ").trim();
  return text.length > 600 ? `${text.slice(0, 600)}...` : text;
}
