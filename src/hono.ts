// Hono entry: the rate-limit middleware, key helpers, the permit endpoint app and the shared headers.
export { rateLimit } from './http/middleware.js';
export type { RateLimitOptions } from './http/middleware.js';
export { clientIp, ipKey, headerKey } from './http/key.js';
export type { ClientIpOptions, IpKeyOptions, HeaderKeyOptions, KeyFunction } from './http/key.js';
export { createForwarder } from './http/gateway.js';
export type { ForwardOptions, Forwarder } from './http/gateway.js';
export { permitApp, MAX_PERMIT_WAIT_MS } from './http/permit-app.js';
export { parsePermitTokens, ROUTE_RIGHTS, RIGHTS } from './http/auth.js';
export type { PermitToken, Right } from './http/auth.js';
export type { PermitAppOptions, PermitBody } from './http/permit-app.js';
export { rateLimitHeaders } from './http/headers.js';
export { problemResponse, problemType, PROBLEMS } from './http/problem.js';
export type { ProblemType } from './http/problem.js';
