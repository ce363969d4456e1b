// The dashboard end to end (TestUIDashboard): two real gateways in one cluster, with an API key and an admin
// key, driven through headless Chromium as a user would. The config comes as JSON on stdin; each step is
// logged as a JSON line, with its screenshot.
import { assert, launch, log, readConfig, step } from './ui_lib.mjs';

const cfg = await readConfig();
const env = await launch(cfg);
const { page } = env;
const text = (sel) => page.locator(sel).first().innerText();
const rows = () => page.locator('tr[data-instance]');

let tinyID = '';
let answerID = '';

try {
  await step(env, 'the page asks for the API key', async () => {
    await page.goto(cfg.url + '/');
    await page.locator('#key-dialog[open]').waitFor();
    const why = await text('#key-why');
    assert(/API key/i.test(why), 'the key dialog says: ' + why);
    await env.shot('key-dialog');
    await page.fill('#key-input', cfg.apiKey);
    await page.keyboard.press('Enter');
    await page.locator('#conn', { hasText: '2 of 2 nodes alive' }).waitFor();
  });

  await step(env, 'the cluster view shows both nodes, their path and their instances', async () => {
    for (const id of [cfg.node1, cfg.node2]) await page.locator(`tr[data-node="${id}"]`).waitFor();
    await page.locator(`tr[data-instance="${cfg.prefill}"]`, { hasText: 'ready' }).waitFor();
    await page.locator(`tr[data-instance="${cfg.decode}"]`, { hasText: 'ready' }).waitFor();
    await page.locator('#path-from').waitFor();
    assert((await page.locator('.matrix span').count()) === 4, 'the path matrix has not 2 × 2 cells');
    const pathRow = await text('section[aria-labelledby="paths-h"] tbody tr');
    assert(/loopback|ethernet|other/.test(pathRow), 'the path from node 1 says: ' + pathRow);
    await env.shot('cluster');
  });

  await step(env, 'loading a model asks for the admin key, then loads it', async () => {
    await page.fill('#load-model', cfg.tinyModel);
    await page.selectOption('#load-node', cfg.node1);
    await page.click('#load-submit');
    await page.locator('#key-dialog[open]').waitFor();
    assert((await text('#key-title')) === 'Admin key', 'the dialog does not ask for the admin key');
    const why = await text('#key-why');
    assert(/admin key/i.test(why), 'the admin-key dialog says: ' + why);
    await env.shot('admin-key');
    await page.fill('#key-input', cfg.adminKey);
    await page.keyboard.press('Enter');
    await page.locator('#load-msg', { hasText: 'Loaded' }).waitFor({ timeout: 60000 });
    await page.waitForFunction((n) => document.querySelectorAll('tr[data-instance]').length === n, 3);
    const ids = await rows().evaluateAll((trs) => trs.map((tr) => tr.dataset.instance));
    tinyID = ids.find((id) => id !== cfg.prefill && id !== cfg.decode);
    assert(tinyID, 'no new instance in ' + ids.join(', '));
    await page.locator(`tr[data-instance="${tinyID}"]`, { hasText: 'ready' }).waitFor();
    await env.shot('model-loaded');
  });

  await step(env, 'a route made with the keyboard: toggle the roles, see it checked, save, see it listed', async () => {
    await page.evaluate(() => document.activeElement && document.activeElement.blur());
    let found = false;
    for (let i = 0; i < 15 && !found; i++) {
      await page.keyboard.press('Tab');
      found = await page.evaluate(() => document.activeElement && document.activeElement.textContent === 'P/D routes');
    }
    assert(found, 'Tab never reached the P/D routes tab');
    await page.keyboard.press('Enter');
    await page.locator('#new-route').focus();
    await page.keyboard.press('Enter');
    await page.locator('#editor-h').waitFor();
    await page.locator(`.pick[data-instance="${cfg.prefill}"] button.prefill`).focus();
    await page.keyboard.press('Space');
    await page.locator(`.pick[data-instance="${cfg.decode}"] button.decode`).focus();
    await page.keyboard.press('Space');
    await page.locator('#route-check', { hasText: 'accepts this route' }).waitFor();
    assert(await page.locator('#save-route').isEnabled(), 'Save is disabled for a valid route');
    await env.shot('route-editor');
    await page.locator('#save-route').focus();
    await page.keyboard.press('Enter');
    const card = page.locator('.route-card');
    await card.first().waitFor();
    assert((await card.count()) === 1, 'not one route card');
    await card.locator('.chips').first().locator(`[data-instance="${cfg.prefill}"]`).waitFor();
    await card.locator('.chips').nth(1).locator(`[data-instance="${cfg.decode}"]`).waitFor();
    assert(/exact KV/.test(await card.innerText()), 'the route is not marked exact');
    await env.shot('route-listed');
  });

  await step(env, 'an invalid pair shows the API\'s reason and cannot be saved', async () => {
    await page.click('#new-route');
    await page.click(`.pick[data-instance="${tinyID}"] button.prefill`);
    await page.click(`.pick[data-instance="${cfg.decode}"] button.decode`);
    await page.locator('#route-check', { hasText: 'refuses this route' }).waitFor();
    const why = await text('#route-check');
    assert(/cannot share KV/.test(why), 'the check says: ' + why);
    assert(await page.locator('#save-route').isDisabled(), 'Save is enabled for a pair the API refuses');
    await env.shot('invalid-pair');
    await page.click('#cancel-route');
    await page.locator('#editor-h').waitFor({ state: 'detached' });
  });

  await step(env, 'a long chat message: the tokens stream in', async () => {
    await page.goto(cfg.url + '/#/chat');
    await page.locator('#chat-model option[value="embedded"]').waitFor({ state: 'attached' });
    await page.selectOption('#chat-model', 'embedded');
    await page.fill('#chat-temperature', '0');
    await page.fill('#chat-max-tokens', String(cfg.maxTokens));
    await page.check('#chat-ignore-eos'); // the generated model's greedy answer is short: make it long
    // Every change of the answer's text, as it happens.
    await page.evaluate(() => {
      window.__lengths = [];
      new MutationObserver(() => {
        const el = document.querySelector('.msg.assistant .text');
        const n = el ? el.textContent.length : 0;
        if (n && window.__lengths[window.__lengths.length - 1] !== n) window.__lengths.push(n);
      }).observe(document.getElementById('chat-log'), { subtree: true, childList: true, characterData: true });
    });
    await page.fill('#chat-input', cfg.longPrompt);
    await page.click('#chat-send');
    await page.waitForFunction(() => (window.__lengths || []).length > 0);
    await env.shot('streaming');
    await page.locator('.msg.assistant .timeline').waitFor({ timeout: 60000 });
    const lengths = await page.evaluate(() => window.__lengths);
    log({ streamed_updates: lengths.length, final_length: lengths[lengths.length - 1] });
    assert(lengths.length >= 3, `the answer arrived in ${lengths.length} updates, not streamed: ${lengths}`);
  });

  await step(env, 'the answer\'s timeline shows the remote prefill and its node', async () => {
    const tl = page.locator('.msg.assistant .timeline').last();
    const data = await tl.evaluate((el) => ({ ...el.dataset }));
    log({ timeline: data });
    assert(data.prefillSource === 'remote', 'prefill source ' + data.prefillSource);
    assert(data.prefillNode === cfg.node1, `prefilled on ${data.prefillNode}, want node 1 ${cfg.node1}`);
    assert(data.decodeNode === cfg.node2 && data.entryNode === cfg.node1, `decode ${data.decodeNode}, entry ${data.entryNode}`);
    const words = await tl.innerText();
    assert(words.includes('prefilled remotely on') && words.includes(cfg.node1Name), 'the timeline says: ' + words);
    for (const phase of ['routing', 'queue', 'prefill', 'wait', 'transfer', 'ingest', 'first', 'decode']) {
      assert((await tl.locator(`[data-phase="${phase}"]`).count()) === 1, 'no ' + phase + ' row');
    }
    answerID = (await page.locator('.msg.assistant .answer-foot .mono').last().innerText()).trim();
    log({ answer_request_id: answerID });
    await tl.scrollIntoViewIfNeeded();
    await env.shot('answer-timeline');
  });

  await step(env, 'Stop ends a long answer', async () => {
    await page.click('#chat-clear');
    await page.fill('#chat-max-tokens', '4000');
    await page.fill('#chat-input', 'Tell me a very long story about the sea.');
    await page.click('#chat-send');
    await page.waitForFunction(() => {
      const el = document.querySelector('.msg.assistant .text');
      return el && el.textContent.length > 20;
    });
    await page.click('#chat-stop');
    await page.locator('.msg.assistant', { hasText: 'Stopped' }).waitFor();
    assert(await page.locator('#chat-send').isEnabled(), 'Send stays disabled after Stop');
    await env.shot('stopped');
  });

  await step(env, 'the requests view lists the answer with its timeline, and the charts', async () => {
    await page.goto(cfg.url + '/#/requests');
    const row = page.locator(`tr[data-request="${answerID}"]`);
    await row.waitFor();
    assert(/remote/.test(await row.innerText()), 'the row does not say remote: ' + (await row.innerText()));
    await row.locator('button', { hasText: 'Details' }).click();
    await page.locator('.detail-row .timeline[data-prefill-source="remote"]').waitFor();
    assert((await page.locator('.chart canvas').count()) >= 4, 'fewer than 4 charts');
    await page.locator('tr[data-request]', { hasText: '499' }).first().waitFor();
    await env.shot('requests');
    // Node 2's own record of the same request, read through node 1.
    await page.selectOption('#requests-node', cfg.node2);
    await page.locator(`tr[data-request="${answerID}"]`, { hasText: 'forwarded here' }).waitFor();
    await page.selectOption('#requests-node', '');
    await page.locator(`tr[data-request="${answerID}"]`, { hasText: 'remote' }).waitFor();
  });

  await step(env, 'the route shows its remote-prefill share', async () => {
    await page.goto(cfg.url + '/#/routes');
    const stats = page.locator('.route-card .route-stats');
    await stats.waitFor();
    const s = await stats.innerText();
    assert(/100% prefilled remotely \(1 of 1/.test(s), 'the route says: ' + s);
    assert(/1 stopped by their client/.test(s), 'the stopped request is not counted: ' + s);
    await env.shot('route-stats');
  });

  await step(env, 'edit the route: swap the roles', async () => {
    await page.locator('.route-card button', { hasText: 'Edit' }).click();
    await page.click(`.pick[data-instance="${cfg.prefill}"] button.none`);
    await page.click(`.pick[data-instance="${cfg.decode}"] button.prefill`);
    await page.click(`.pick[data-instance="${cfg.prefill}"] button.decode`);
    await page.locator('#route-check', { hasText: 'accepts this route' }).waitFor();
    await page.click('#save-route');
    await page.locator('#editor-h').waitFor({ state: 'detached' });
    const card = page.locator('.route-card');
    await card.locator('.chips').first().locator(`[data-instance="${cfg.decode}"]`).waitFor();
    await card.locator('.chips').nth(1).locator(`[data-instance="${cfg.prefill}"]`).waitFor();
    await env.shot('route-edited');
  });

  await step(env, 'delete the route, after a confirmation', async () => {
    await page.locator('.route-card button', { hasText: 'Remove' }).click();
    await page.locator('#confirm-dialog[open]').waitFor();
    await env.shot('confirm-remove');
    await page.click('#confirm-yes');
    await page.locator('.route-card').waitFor({ state: 'detached' });
    await page.locator('text=No routes yet').waitFor();
    await env.shot('route-removed');
  });

  await step(env, 'the instances show the speeds their nodes measured', async () => {
    await page.goto(cfg.url + '/#/cluster');
    // The decode instance decoded the chats: its node measured it and gossiped the figures (within a few
    // seconds); an instance nothing ran on says so.
    await page.locator(`tr[data-instance="${cfg.decode}"] .speed`, { hasText: /decode \d+(\.\d)? tok\/s/ }).waitFor({ timeout: 20000 });
    await page.locator(`tr[data-instance="${tinyID}"]`, { hasText: 'not measured' }).waitFor();
    await env.shot('instance-speeds');
  });

  await step(env, 'unload the extra model', async () => {
    await page.goto(cfg.url + '/#/cluster');
    await page.locator(`tr[data-instance="${tinyID}"] button`, { hasText: 'Unload' }).click();
    await page.locator('#confirm-dialog[open]').waitFor();
    await page.click('#confirm-yes');
    await page.locator(`tr[data-instance="${tinyID}"]`).waitFor({ state: 'detached', timeout: 20000 });
  });

  await step(env, 'settings: the router, swapped and back, the feature flags and a model alias', async () => {
    await page.goto(cfg.url + '/#/settings');
    await page.locator('#router-current', { hasText: 'router-disagg' }).waitFor();
    await page.locator('section[aria-labelledby="flags-h"] td', { hasText: 'disaggregation' }).waitFor();
    await page.fill('#router-name', 'roundrobin');
    await page.click('#router-swap');
    await page.locator('#router-current', { hasText: 'roundrobin' }).waitFor();
    await page.fill('#router-name', 'router-disagg');
    await page.click('#router-swap');
    await page.locator('#router-current', { hasText: 'router-disagg' }).waitFor();
    await page.locator('section[aria-labelledby="status-h"] td', { hasText: 'running' }).first().waitFor();
    // A model alias, saved, read back, then removed again (other views list models).
    await page.fill('#aliases-text', 'claude-opus-5-5=embedded');
    await page.click('#aliases-save');
    await page.locator('#aliases-msg', { hasText: '1 alias in use' }).waitFor();
    await env.shot('settings');
    // Read back from the gateway: away and back mounts the view anew (a reload would also drop the chat the
    // dark-mode step shows).
    await page.goto(cfg.url + '/#/cluster');
    await page.goto(cfg.url + '/#/settings');
    await page.waitForFunction(() => document.querySelector('#aliases-text')?.value === 'claude-opus-5-5=embedded');
    await page.fill('#aliases-text', '');
    await page.click('#aliases-save');
    await page.locator('#aliases-msg', { hasText: '0 aliases in use' }).waitFor();
  });

  await step(env, 'dark mode', async () => {
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.goto(cfg.url + '/#/cluster');
    await page.locator(`tr[data-node="${cfg.node2}"]`).waitFor();
    const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const [r, g, b] = bg.match(/\d+/g).map(Number);
    assert(r + g + b < 150, 'the background is not dark: ' + bg);
    await env.shot('dark-cluster');
    await page.goto(cfg.url + '/#/chat');
    await page.locator('.msg.assistant').first().waitFor();
    await env.shot('dark-chat');
    await page.goto(cfg.url + '/#/requests');
    await page.locator('tr[data-request]').first().waitFor();
    await env.shot('dark-requests');
  });
  log({ ok: true, answer_request_id: answerID, tiny: tinyID });
} finally {
  await env.browser.close();
}
