/**
 * The Atelier SDK (`import { createClient } from 'atelier/sdk'`): a typed client of every route
 * of the API, built from the route table the server is checked against. The CLI uses it too.
 */
export { AtelierClient, createClient, errorFromAnswer, fetchTransport } from './client.js';
export type { CallArgs, ClientOptions, SdkRequest, Transport } from './client.js';
export { AtelierError, ROUTES, openApiDocument } from '../core/index.js';
export type { Workshop, WorkshopStatus, ExecResult, ErrorCode } from '../core/index.js';
export type { RouteBody, RouteName, RouteParams, RouteQuery, RouteResponse } from '../core/index.js';
