// IP addresses and CIDR ranges, parsed by hand (Workers have no node:net): enough to decide whether an
// X-Forwarded-For hop is a trusted proxy, and to key IPv6 clients by their subnet.

/** An address as 4 (IPv4) or 16 (IPv6) bytes. IPv4-mapped IPv6 (::ffff:a.b.c.d) is returned as IPv4. */
export type IpBytes = Uint8Array;

function parseV4(s: string): IpBytes | undefined {
  const parts = s.split('.');
  if (parts.length !== 4) return undefined;
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const p = parts[i]!;
    if (!/^\d{1,3}$/.test(p) || (p.length > 1 && p[0] === '0')) return undefined;
    const n = Number(p);
    if (n > 255) return undefined;
    out[i] = n;
  }
  return out;
}

function parseV6(s: string): IpBytes | undefined {
  const zone = s.indexOf('%');
  if (zone >= 0) s = s.slice(0, zone);
  let tail: IpBytes | undefined;
  const lastColon = s.lastIndexOf(':');
  if (s.includes('.', lastColon)) {
    tail = parseV4(s.slice(lastColon + 1));
    if (!tail) return undefined;
    s = `${s.slice(0, lastColon + 1)}0:0`;
  }
  const halves = s.split('::');
  if (halves.length > 2) return undefined;
  const groups = (h: string) => (h === '' ? [] : h.split(':'));
  const head = groups(halves[0]!);
  const rest = halves.length === 2 ? groups(halves[1]!) : [];
  const missing = 8 - head.length - rest.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  const all = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill('0'), ...rest];
  const out = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    const g = all[i]!;
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
    const n = parseInt(g, 16);
    out[i * 2] = n >> 8;
    out[i * 2 + 1] = n & 0xff;
  }
  if (tail) out.set(tail, 12);
  const mapped = out.subarray(0, 10).every((b) => b === 0) && out[10] === 0xff && out[11] === 0xff;
  return mapped ? out.slice(12) : out;
}

/** Parses an IPv4 or IPv6 address (brackets and a zone id allowed); undefined when it is not one. */
export function parseIp(s: string): IpBytes | undefined {
  s = s.trim();
  if (s.startsWith('[') && s.endsWith(']')) s = s.slice(1, -1);
  return s.includes(':') ? parseV6(s) : parseV4(s);
}

const isPort = (s: string) => /^\d{1,5}$/.test(s) && Number(s) <= 65535;

/**
 * Parses an address as proxies and platforms write it: a bare IPv4 or IPv6 address, `[v6]`, or either
 * with a port (`203.0.113.7:51234`, `[2001:db8::1]:443`; Azure Application Gateway writes these into
 * X-Forwarded-For). The port is dropped. An IPv6 address with a port must be bracketed: `2001:db8::1:443`
 * is the address it reads as. Undefined when the text is none of these.
 */
export function parseIpPort(s: string): IpBytes | undefined {
  s = s.trim();
  if (s.startsWith('[')) {
    const close = s.indexOf(']');
    const rest = s.slice(close + 1);
    if (close < 0 || (rest !== '' && !(rest[0] === ':' && isPort(rest.slice(1))))) return undefined;
    const inner = s.slice(1, close);
    return inner.includes(':') ? parseV6(inner) : undefined;
  }
  const colon = s.indexOf(':');
  // Exactly one colon: IPv4 with a port (an IPv6 address has at least two).
  if (colon >= 0 && colon === s.lastIndexOf(':')) return isPort(s.slice(colon + 1)) ? parseV4(s.slice(0, colon)) : undefined;
  return colon >= 0 ? parseV6(s) : parseV4(s);
}

// Dotted IPv4 in canonical form (no leading zeros), as platforms and proxies usually write it.
const CANONICAL_V4 = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

/**
 * The canonical text of an address written as parseIpPort accepts it (port dropped, IPv4-mapped IPv6 as
 * IPv4, IPv6 per RFC 5952), or undefined when the text is not an address.
 */
export function canonicalIp(s: string): string | undefined {
  if (CANONICAL_V4.test(s)) return s;
  const ip = parseIpPort(s);
  return ip && formatIp(ip);
}

export interface Cidr {
  bytes: IpBytes;
  prefix: number;
}

/** Parses `addr/prefix` or a bare address (a /32 or /128). Throws a RangeError naming the value. */
export function parseCidr(s: string): Cidr {
  const [addr, len, extra] = s.trim().split('/');
  const bytes = addr === undefined ? undefined : parseIp(addr);
  if (!bytes || extra !== undefined) throw new RangeError(`not an IP address or CIDR range: ${JSON.stringify(s.slice(0, 60))}`);
  // An IPv4-mapped range (::ffff:10.0.0.0/104) is stored as the IPv4 range it means.
  const mappedShift = bytes.length === 4 && addr!.includes(':') ? 96 : 0;
  const max = bytes.length * 8;
  const prefix = len === undefined ? max : /^\d{1,3}$/.test(len) ? Number(len) - mappedShift : NaN;
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > max) throw new RangeError(`bad prefix length in ${JSON.stringify(s.slice(0, 60))}`);
  return { bytes, prefix };
}

export function inCidr(ip: IpBytes, range: Cidr): boolean {
  if (ip.length !== range.bytes.length) return false;
  let bits = range.prefix;
  for (let i = 0; bits > 0; i++, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if ((ip[i]! & mask) !== (range.bytes[i]! & mask)) return false;
  }
  return true;
}

/** The canonical text of an address: dotted IPv4, or RFC 5952 IPv6 (lower case, longest zero run as ::). */
export function formatIp(ip: IpBytes): string {
  if (ip.length === 4) return ip.join('.');
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((ip[i]! << 8) | ip[i + 1]!);
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

/** An IPv6 address with all but its first `prefix` bits cleared, written as `addr/prefix`. */
export function ipv6Subnet(ip: IpBytes, prefix: number): string {
  const out = new Uint8Array(16);
  let bits = prefix;
  for (let i = 0; i < 16 && bits > 0; i++, bits -= 8) out[i] = ip[i]! & (bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff);
  return `${formatIp(out)}/${prefix}`;
}
