// An institution's OpenID Connect provider for the end-to-end tests: npm
// oidc-provider (a certified implementation), with its development
// interactions (any login name and password sign in) and one client, the
// exchange. Whoever signs in as <name> is <name>@example.org, a verified
// address; the ID token carries sub only, the profile and email are at
// UserInfo, as this provider does by default.
//
// Usage: node peers/oidc-provider.mjs <port> <client id> <client secret> <redirect uri>
import Provider from 'oidc-provider';

const [port, clientId, clientSecret, redirectUri] = process.argv.slice(2);
if (!redirectUri) {
  console.error('usage: oidc-provider.mjs <port> <client id> <client secret> <redirect uri>');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    redirect_uris: [redirectUri],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['given_name', 'family_name'] },
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  async findAccount(_ctx, id) {
    const name = id.toLowerCase();
    return {
      accountId: id,
      async claims() {
        return { sub: `uni-${name}`, email: `${name}@example.org`, email_verified: true, given_name: name, family_name: 'Federated' };
      },
    };
  },
});
provider.proxy = false;
provider.listen(Number(port), '127.0.0.1', () => console.log(`oidc-provider listening on ${issuer}`));
