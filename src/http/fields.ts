// What a request's header fields may hold, shared by the app's check (every entry), the gateway and the
// Lambda adapter, so that every entry refuses the same Hosts and values.

/** A host name or an IP literal, with an optional port: nothing that could end a URL's authority. */
export const HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::\d{1,5})?$/;

/** RFC 9110 §5.5: a field value holds no control character but HTAB (obs-text, 0x80 and up, is allowed). */
export const CONTROL = /[\x00-\x08\x0a-\x1f\x7f]/;
