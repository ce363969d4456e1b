package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Health is GET /healthz (no key).
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.get(ctx, APIKey, "/healthz", &h)
	return h, err
}

// State is GET /state: the whole cluster as this gateway's node sees it.
func (c *Client) State(ctx context.Context) (State, error) {
	var s State
	err := c.get(ctx, APIKey, "/state", &s)
	return s, err
}

// Models is GET /v1/models: the models the cluster serves and this gateway's aliases of them.
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	var page struct {
		Data []Model `json:"data"`
	}
	err := c.get(ctx, APIKey, "/v1/models", &page)
	return page.Data, err
}

// Instances is GET /v1/instances: every instance of the cluster.
func (c *Client) Instances(ctx context.Context) ([]Instance, error) {
	var out struct {
		Instances []Instance `json:"instances"`
	}
	err := c.get(ctx, APIKey, "/v1/instances", &out)
	return out.Instances, err
}

// CreateInstance is POST /v1/instances: it loads a model on a node and answers once it is loaded.
func (c *Client) CreateInstance(ctx context.Context, in NewInstance) (Instance, error) {
	if in.Model == "" {
		return Instance{}, errors.New("CreateInstance: a model is required")
	}
	var out Instance
	err := c.send(ctx, http.MethodPost, "/v1/instances", in, &out)
	return out, err
}

// DeleteInstance is DELETE /v1/instances/{id}: it unloads an instance, on whichever node serves it.
func (c *Client) DeleteInstance(ctx context.Context, id string) error {
	return c.send(ctx, http.MethodDelete, "/v1/instances/"+url.PathEscape(id), nil, nil)
}

// Links is GET /v1/instance-links.
func (c *Client) Links(ctx context.Context) ([]Link, error) {
	var out []Link
	err := c.get(ctx, APIKey, "/v1/instance-links", &out)
	return out, err
}

// CreateLink is POST /v1/instance-links: prefill serves decode.
func (c *Client) CreateLink(ctx context.Context, prefill, decode []string) (LinkWrite, error) {
	var out LinkWrite
	err := c.send(ctx, http.MethodPost, "/v1/instance-links", linkBody(prefill, decode), &out)
	if err == nil && out.LinkID == "" {
		err = fmt.Errorf("POST %s/v1/instance-links answered no link_id", c.base)
	}
	return out, err
}

// UpdateLink is PUT /v1/instance-links/{id}.
func (c *Client) UpdateLink(ctx context.Context, id string, prefill, decode []string) (LinkWrite, error) {
	var out LinkWrite
	err := c.send(ctx, http.MethodPut, "/v1/instance-links/"+url.PathEscape(id), linkBody(prefill, decode), &out)
	return out, err
}

// DeleteLink is DELETE /v1/instance-links/{id}.
func (c *Client) DeleteLink(ctx context.Context, id string) error {
	return c.send(ctx, http.MethodDelete, "/v1/instance-links/"+url.PathEscape(id), nil, nil)
}

// CheckLink is POST /admin/v1/instance-links/check: whether a link of prefill to decode would be accepted,
// without writing it.
func (c *Client) CheckLink(ctx context.Context, prefill, decode []string) (LinkCheck, error) {
	var out LinkCheck
	_, err := c.Call(ctx, APIKey, http.MethodPost, "/admin/v1/instance-links/check", linkBody(prefill, decode), &out)
	return out, err
}

func linkBody(prefill, decode []string) map[string][]string {
	return map[string][]string{"prefill_instances": prefill, "decode_instances": decode}
}

// FeatureFlags is GET /v1/feature-flags (exo's): which features this gateway has.
func (c *Client) FeatureFlags(ctx context.Context) (map[string]bool, error) {
	var out map[string]bool
	err := c.get(ctx, APIKey, "/v1/feature-flags", &out)
	return out, err
}

// Router is GET /admin/v1/router.
func (c *Client) Router(ctx context.Context) (Router, error) {
	var out Router
	err := c.get(ctx, APIKey, "/admin/v1/router", &out)
	return out, err
}

// SetRouter is PUT /admin/v1/router: new requests go to the router named (a built-in one or a plugin's path)
// once it has started; sha256, when not empty, pins the plugin's binary. It answers the router now in use.
func (c *Client) SetRouter(ctx context.Context, name, sha256 string) (string, error) {
	body := map[string]string{"router": name}
	if sha256 != "" {
		body["sha256"] = sha256
	}
	var out struct {
		Router string `json:"router"`
	}
	err := c.send(ctx, http.MethodPut, "/admin/v1/router", body, &out)
	return out.Router, err
}

// ModelAliases is GET /admin/v1/model-aliases: this gateway's model names that stand for others.
func (c *Client) ModelAliases(ctx context.Context) (map[string]string, error) {
	var out struct {
		Aliases map[string]string `json:"aliases"`
	}
	err := c.get(ctx, APIKey, "/admin/v1/model-aliases", &out)
	return out.Aliases, err
}

// SetModelAliases is PUT /admin/v1/model-aliases: it replaces every alias of this gateway and answers them.
func (c *Client) SetModelAliases(ctx context.Context, aliases map[string]string) (map[string]string, error) {
	if aliases == nil {
		aliases = map[string]string{}
	}
	var out struct {
		Aliases map[string]string `json:"aliases"`
	}
	err := c.send(ctx, http.MethodPut, "/admin/v1/model-aliases", map[string]any{"aliases": aliases}, &out)
	return out.Aliases, err
}

// Keys is GET /admin/v1/cluster/keys (admin key): the gossip keyring across the cluster.
func (c *Client) Keys(ctx context.Context) (Keyring, error) {
	var out Keyring
	err := c.get(ctx, AdminKey, "/admin/v1/cluster/keys", &out)
	return out, err
}

// ChangeKeys is POST /admin/v1/cluster/keys: op is install, use or remove, key the gossip key in base64.
func (c *Client) ChangeKeys(ctx context.Context, op, key string) error {
	return c.send(ctx, http.MethodPost, "/admin/v1/cluster/keys", map[string]string{"op": op, "key": key}, nil)
}

// Status is GET /admin/v1/status: this gateway's requests in flight, instances, engine figures and plugins.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var out Status
	err := c.get(ctx, APIKey, "/admin/v1/status", &out)
	return out, err
}

// RequestsQuery selects recent requests: those after a seq (from an earlier answer's Last) or a time, of this
// gateway or, with Node, of another node's gateway.
type RequestsQuery struct {
	Since     uint64
	SinceTime time.Time
	Node      string
}

// Requests is GET /admin/v1/requests: the gateway's recent requests, oldest first.
func (c *Client) Requests(ctx context.Context, q RequestsQuery) (Requests, error) {
	v := url.Values{}
	switch {
	case q.Since > 0:
		v.Set("since", strconv.FormatUint(q.Since, 10))
	case !q.SinceTime.IsZero():
		v.Set("since", q.SinceTime.UTC().Format(time.RFC3339Nano))
	}
	if q.Node != "" {
		v.Set("node", q.Node)
	}
	path := "/admin/v1/requests"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out Requests
	err := c.get(ctx, APIKey, path, &out)
	return out, err
}

// Paths is GET /admin/v1/paths.
func (c *Client) Paths(ctx context.Context) (Paths, error) {
	var out Paths
	err := c.get(ctx, APIKey, "/admin/v1/paths", &out)
	return out, err
}

// ClusterStats is GET /admin/v1/cluster/stats.
func (c *Client) ClusterStats(ctx context.Context) (ClusterStats, error) {
	var out ClusterStats
	err := c.get(ctx, APIKey, "/admin/v1/cluster/stats", &out)
	return out, err
}

// linkProbeMax bounds what LinkProbe reads: a probe is a few MiB.
const linkProbeMax = 64 << 20

// LinkProbe is GET /admin/v1/link-probe: it downloads the probe a gateway serves to measure the link to it
// and returns how many bytes came. A gateway serves one probe at a time; a busy one answers 503.
func (c *Client) LinkProbe(ctx context.Context) (int64, error) {
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	u := c.base + "/admin/v1/link-probe"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	c.Authorize(req, APIKey)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, Unreachable(http.MethodGet, u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, ReadError(resp)
	}
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, linkProbeMax))
	if err != nil {
		return n, fmt.Errorf("GET %s: %w", u, err)
	}
	return n, nil
}
