// A real OpenID Connect provider (npm `oidc-provider`) on 127.0.0.1 for Maestro's tests; started
// and stopped by `maestro_testkit::OidcProvider` (crates/maestro-testkit/src/oidc.rs).
//
// Configuration, from the environment:
//   OIDC_PORT            port to listen on (default 0: any free port)
//   OIDC_CLIENT_ID       the one registered client (confidential, client_secret_basic)
//   OIDC_CLIENT_SECRET
//   OIDC_REDIRECT_URIS   its redirect URIs, separated by spaces
//
// When it listens it prints one JSON line on stdout, `{"issuer":"http://127.0.0.1:PORT"}`. It
// exits when its stdin closes, so a test that dies does not leave it behind.
//
// Login and consent are the library's development interactions: plain HTML forms at
// /interaction/:uid that accept any login name (the account's id and `email` claim) with any
// password, then a consent form granting what the client asked for.
import crypto from 'node:crypto';
import http from 'node:http';

// oidc-provider 9 checks PKCE with crypto.hash (node 20.12 and later); exit 3 means "cannot run
// on this node", which the tests report as a missing prerequisite.
if (typeof crypto.hash !== 'function') {
  process.stderr.write(`node ${process.version} is older than 20.12 (oidc-provider 9 needs crypto.hash): install node 20.12 or later\n`);
  process.exit(3);
}

const { default: Provider } = await import('oidc-provider');

function required(name) {
  const value = process.env[name];
  if (!value) {
    process.stderr.write(`provider.mjs: environment variable ${name} is not set\n`);
    process.exit(2);
  }
  return value;
}

const client = {
  client_id: required('OIDC_CLIENT_ID'),
  client_secret: required('OIDC_CLIENT_SECRET'),
  redirect_uris: required('OIDC_REDIRECT_URIS').split(/\s+/).filter(Boolean),
  grant_types: ['authorization_code'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_basic',
  scope: 'openid email profile',
};

const server = http.createServer();
server.listen(Number(process.env.OIDC_PORT ?? 0), '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [client],
    // Every login name is an account; its email is the name itself.
    async findAccount(ctx, id) {
      return {
        accountId: id,
        async claims() {
          return {
            sub: id,
            email: id,
            email_verified: true,
            name: id.split('@')[0],
          };
        },
      };
    },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name'],
    },
    scopes: ['openid', 'email', 'profile'],
    // The claims of the granted scopes go into the ID token too, not only to userinfo.
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    // Fixed keys for the session cookies' signatures (the provider is thrown away after a test).
    cookies: { keys: ['maestro-test-oidc-provider'] },
    features: { devInteractions: { enabled: true } },
  });
  // Cookies are only marked `secure` on https requests, so plain http on loopback works as is.
  server.on('request', provider.callback());
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
});

process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
