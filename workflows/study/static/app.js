// The participant page of a human study (workflows/study): one person, one dialogue.
//
// Every API reply is the participant's whole state, and the page draws only from it, so a reload
// or a server restart continues where the person was. Text from the server or the person goes in
// through textContent only (never markup): an agent's reply is shown exactly as it was written.
'use strict';

(function studyPage() {
  const PHASES = ['instructions', 'chat', 'survey', 'done'];
  const DEFAULT_MAX_CHARS = 500;
  const PENDING_POLL_MS = 1500;
  const UNREACHABLE = 'The study server could not be reached. ' +
    'Please check your connection and try again.';

  const byId = (id) => document.getElementById(id);
  const ui = {
    alert: byId('alert'),
    loading: byId('loading'),
    progress: byId('progress'),
    views: {
      instructions: byId('view-instructions'),
      chat: byId('view-chat'),
      survey: byId('view-survey'),
      done: byId('view-done'),
    },
    titles: {
      instructions: byId('instructions-title'),
      chat: byId('chat-title'),
      survey: byId('survey-title'),
      done: byId('done-title'),
    },
    instructionsText: byId('instructions-text'),
    startButton: byId('start-button'),
    cardRole: byId('card-role'),
    cardList: byId('card-list'),
    messages: byId('messages'),
    chatStatus: byId('chat-status'),
    chatEnded: byId('chat-ended'),
    continueButton: byId('continue-button'),
    messageForm: byId('message-form'),
    messageInput: byId('message-input'),
    charCounter: byId('char-counter'),
    sendButton: byId('send-button'),
    closingForm: byId('closing-form'),
    closingHint: byId('closing-hint'),
    closingLabel: byId('closing-label'),
    closingPrefix: byId('closing-prefix'),
    closingInput: byId('closing-input'),
    closingButton: byId('closing-button'),
    surveyForm: byId('survey-form'),
    surveyItems: byId('survey-items'),
    surveyButton: byId('survey-button'),
    completionCode: byId('completion-code'),
  };

  const page = {
    token: tokenFromPath(window.location.pathname),
    state: null,
    view: null,
    busy: false,             // a request that changes the state is in flight
    pendingText: null,       // the person's message while its POST is in flight
    holdChat: false,         // the dialogue just ended in front of the person: let them read it
    surveyBuiltFor: null,    // the survey items the form was built from
    pollTimer: null,
  };

  // ---- The API (workflows/study/app.py) ----

  /** The participant token: the last segment of /s/{token}. */
  function tokenFromPath(path) {
    const match = /\/s\/([A-Za-z0-9_-]+)\/?$/.exec(path);
    return match ? match[1] : null;
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  /** The server's `detail` as one sentence (FastAPI's validation errors are a list). */
  function detailText(payload, status) {
    const detail = payload && payload.detail;
    if (typeof detail === 'string' && detail.trim()) return detail;
    if (Array.isArray(detail)) {
      const messages = detail.map((item) => item && item.msg).filter(Boolean);
      if (messages.length) return messages.join('; ');
    }
    return `The request failed (HTTP ${status}). Please try again.`;
  }

  async function api(method, suffix, body) {
    const init = {method, headers: {Accept: 'application/json'}, cache: 'no-store'};
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(`/api/s/${page.token}${suffix}`, init);
    } catch (err) {
      throw new ApiError(0, UNREACHABLE);
    }
    let payload = null;
    try {
      payload = await response.json();
    } catch (err) {
      payload = null;
    }
    if (!response.ok) throw new ApiError(response.status, detailText(payload, response.status));
    if (!payload || typeof payload !== 'object' || !PHASES.includes(payload.phase)) {
      throw new ApiError(response.status, 'The server sent an unexpected reply. ' +
        'Please reload the page.');
    }
    return payload;
  }

  // ---- Small DOM helpers: text only ----

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function showAlert(message) {
    ui.alert.textContent = message;
    ui.alert.hidden = false;
  }

  function clearAlert() {
    ui.alert.textContent = '';
    ui.alert.hidden = true;
  }

  function reportError(err) {
    showAlert(err instanceof ApiError ? err.message : UNREACHABLE);
  }

  // ---- Rendering the state ----

  function render(state) {
    page.state = state;
    ui.loading.hidden = true;
    const view = state.phase !== 'chat' && page.holdChat ? 'chat' : state.phase;
    const entering = view !== page.view;
    for (const [name, node] of Object.entries(ui.views)) node.hidden = name !== view;
    for (const step of ui.progress.children) {
      if (step.dataset.phase === view) step.setAttribute('aria-current', 'step');
      else step.removeAttribute('aria-current');
    }
    page.view = view;
    if (view === 'instructions') renderInstructions(state);
    if (view === 'chat') renderChat(state);
    if (view === 'survey') renderSurvey(state);
    if (view === 'done') renderDone(state);
    if (entering) focusView(view);
    schedulePoll(state);
  }

  function renderInstructions(state) {
    const paragraphs = Array.isArray(state.instructions) ? state.instructions : [];
    ui.instructionsText.replaceChildren(...paragraphs.map((text) => element('p', null, text)));
    ui.startButton.disabled = page.busy;
  }

  function renderCard(state) {
    ui.cardRole.textContent = state.human_role ? `You play the ${state.human_role}.` : '';
    const rows = [];
    for (const pair of Array.isArray(state.card) ? state.card : []) {
      const row = element('div', 'card-row');
      row.append(element('dt', null, pair[0]), element('dd', null, pair[1]));
      rows.push(row);
    }
    ui.cardList.replaceChildren(...rows);
  }

  function messageItem(you, text, pending) {
    const item = element('li', `message ${you ? 'message-you' : 'message-agent'}`);
    if (pending) item.classList.add('message-pending');
    item.append(element('span', 'message-speaker', you ? 'You' : 'Agent'),
                element('p', 'message-text', text));
    return item;
  }

  function renderMessages(state) {
    const turns = Array.isArray(state.turns) ? state.turns : [];
    const items = turns.map((turn) => messageItem(Boolean(turn.you), turn.text, false));
    if (page.pendingText !== null) items.push(messageItem(true, page.pendingText, true));
    if (!items.length) {
      items.push(element('li', 'messages-empty',
                         'The conversation starts when you send your first message.'));
    }
    const countBefore = ui.messages.children.length;
    ui.messages.replaceChildren(...items);
    if (items.length !== countBefore) ui.messages.scrollTop = ui.messages.scrollHeight;
  }

  function maxChars(state) {
    const limit = state.limits && Number(state.limits.max_message_chars);
    return Number.isFinite(limit) && limit > 0 ? Math.floor(limit) : DEFAULT_MAX_CHARS;
  }

  function updateCounter() {
    const limit = Number(ui.messageInput.maxLength);
    const used = ui.messageInput.value.length;
    ui.charCounter.textContent = `${used} / ${limit}`;
    ui.charCounter.classList.toggle('counter-near', used >= 0.9 * limit);
  }

  function renderChat(state) {
    renderCard(state);
    renderMessages(state);
    const ended = state.ended || state.phase !== 'chat';
    const waiting = page.busy || state.agent_pending;
    if (page.pendingText !== null || state.agent_pending) {
      ui.chatStatus.textContent = 'The agent is typing…';
    } else if (page.busy) {
      ui.chatStatus.textContent = 'One moment…';
    } else {
      ui.chatStatus.textContent = '';
    }

    const limit = maxChars(state);
    ui.messageInput.maxLength = limit;
    ui.messageInput.disabled = waiting || ended;
    ui.sendButton.disabled = waiting || ended;
    ui.messageForm.hidden = ended;
    updateCounter();

    const closing = state.closing && state.phase === 'chat' ? state.closing : null;
    ui.closingForm.hidden = !closing;
    if (closing) renderClosing(closing, waiting, ended);

    ui.chatEnded.hidden = !ended;
    ui.continueButton.hidden = state.phase === 'chat';
    if (ended && state.phase === 'chat' && closing) {
      ui.chatEnded.firstElementChild.textContent =
        'The conversation has ended. Please give your answer below to finish it.';
    } else {
      ui.chatEnded.firstElementChild.textContent = 'The conversation has ended.';
    }
  }

  /** Moves the keyboard focus to where a new view starts (its heading, or the message box). */
  function focusView(view) {
    if (view === 'chat' && !ui.messageInput.disabled && !ui.messageForm.hidden) {
      ui.messageInput.focus();
    } else {
      ui.titles[view].focus();
    }
  }

  function renderClosing(closing, waiting, ended) {
    const low = Number(closing.min);
    const high = Number(closing.max);
    const dollars = closing.field === 'donation';
    ui.closingInput.min = String(low);
    ui.closingInput.max = String(high);
    ui.closingInput.disabled = waiting;
    ui.closingButton.disabled = waiting;
    if (dollars) {
      ui.closingLabel.textContent = `Your donation in dollars (${money(low)} to ${money(high)})`;
      ui.closingPrefix.textContent = '$';
      ui.closingButton.textContent = 'End and donate';
      ui.closingHint.textContent = ended ?
        'State how much you donate to finish the conversation.' :
        'When you have decided, state how much you donate. This ends the conversation.';
    } else {
      ui.closingLabel.textContent = `Your ${closing.field} (${low} to ${high})`;
      ui.closingPrefix.textContent = '';
      ui.closingButton.textContent = 'End the conversation';
      ui.closingHint.textContent = 'When you have decided, give your answer. ' +
        'This ends the conversation.';
    }
  }

  function money(value) {
    return `$${value.toFixed(2)}`;
  }

  function surveyItems(state) {
    return Array.isArray(state.survey) ? state.survey : [];
  }

  function isNumberItem(item) {
    return item.type === 'number';
  }

  function renderSurvey(state) {
    const items = surveyItems(state);
    const signature = JSON.stringify(items);
    if (page.surveyBuiltFor !== signature) {
      ui.surveyItems.replaceChildren(...items.map((item, index) => (
        isNumberItem(item) ? numberItem(item, index) : likertItem(item, index))));
      page.surveyBuiltFor = signature;
    }
    ui.surveyButton.disabled = page.busy;
  }

  /** A Likert item: one radio per point, the anchors at the ends (read with points 1 and n). */
  function likertItem(item, index) {
    const scale = Math.max(2, Math.floor(Number(item.scale) || 5));
    const fieldset = element('fieldset', 'survey-item likert');
    fieldset.dataset.itemId = item.id;
    fieldset.append(element('legend', null, `${index + 1}. ${item.text}`));
    const row = element('div', 'likert-row');
    row.append(element('span', 'anchor anchor-low', item.low || ''));
    const options = element('div', 'likert-options');
    for (let point = 1; point <= scale; point += 1) {
      const label = element('label', 'likert-option');
      const input = element('input');
      input.type = 'radio';
      input.name = `item-${item.id}`;
      input.value = String(point);
      label.append(input, element('span', 'likert-number', point));
      const anchor = point === 1 ? item.low : point === scale ? item.high : '';
      if (anchor) label.append(element('span', 'visually-hidden', ` (${anchor})`));
      options.append(label);
    }
    row.append(options, element('span', 'anchor anchor-high', item.high || ''));
    fieldset.append(row);
    return fieldset;
  }

  function numberItem(item, index) {
    const wrapper = element('div', 'survey-item number-item');
    wrapper.dataset.itemId = item.id;
    const inputId = `item-${item.id}`;
    const label = element('label', null, `${index + 1}. ${item.text}`);
    label.htmlFor = inputId;
    const input = element('input');
    input.type = 'number';
    input.id = inputId;
    input.name = inputId;
    input.step = 'any';
    input.inputMode = 'decimal';
    const hasMin = item.min !== undefined && item.min !== null;
    const hasMax = item.max !== undefined && item.max !== null;
    if (hasMin) input.min = String(item.min);
    if (hasMax) input.max = String(item.max);
    const hint = element('p', 'muted small', rangeText(item, hasMin, hasMax));
    hint.id = `${inputId}-hint`;
    input.setAttribute('aria-describedby', hint.id);
    wrapper.append(label, hint, input);
    return wrapper;
  }

  function rangeText(item, hasMin, hasMax) {
    if (hasMin && hasMax) return `A number from ${item.min} to ${item.max}.`;
    if (hasMin) return `A number of at least ${item.min}.`;
    if (hasMax) return `A number of at most ${item.max}.`;
    return 'A number.';
  }

  function renderDone(state) {
    ui.completionCode.textContent = state.completion_code || '';
  }

  // While the server is still producing the agent's reply (another tab, or after a restart),
  // ask again until it is there.
  function schedulePoll(state) {
    window.clearTimeout(page.pollTimer);
    page.pollTimer = null;
    if (!state.agent_pending || page.busy) return;
    page.pollTimer = window.setTimeout(() => {
      api('GET', '').then(render, (err) => {
        reportError(err);
        schedulePoll(page.state);
      });
    }, PENDING_POLL_MS);
  }

  // ---- Actions ----

  /** Runs one state-changing request; the page is re-rendered busy before and after. */
  async function act(request) {
    if (page.busy) return null;
    page.busy = true;
    clearAlert();
    render(page.state);
    try {
      return await request();
    } finally {
      page.busy = false;
    }
  }

  /**
   * Posts one action and draws the state it answers with; on an error, says so, and after a
   * 409 (the server has moved on, e.g. in another tab) draws the server's state first.
   */
  async function post(suffix, body) {
    try {
      const state = await act(() => api('POST', suffix, body));
      if (state) render(state);
    } catch (err) {
      reportError(err);
      if (err instanceof ApiError && err.status === 409) await refresh();
      render(page.state);
    }
  }

  async function sendMessage() {
    const text = ui.messageInput.value;
    if (!text.trim() || page.busy || !page.state) return;
    const seen = page.state.turns.length;
    page.pendingText = text;
    ui.messageInput.value = '';
    try {
      const state = await act(() => api('POST', '/message', {text, turn: seen}));
      page.pendingText = null;
      if (!state) return;
      if (state.phase !== 'chat') page.holdChat = true;
      render(state);
      if (!ui.messageInput.disabled && !ui.messageForm.hidden) ui.messageInput.focus();
    } catch (err) {
      page.pendingText = null;
      reportError(err);
      // A turn mismatch means the server has moved on (e.g. a retry already went through).
      if (err instanceof ApiError && err.status === 409) await refresh();
      const last = page.state.turns[page.state.turns.length - 1];
      const delivered = page.state.turns.length > seen && last && last.you && last.text === text;
      if (!delivered && !ui.messageInput.value) ui.messageInput.value = text;
      render(page.state);
    }
  }

  async function close() {
    const closing = page.state && page.state.closing;
    if (!closing) return;
    const raw = ui.closingInput.value.trim();
    const value = Number(raw);
    const low = Number(closing.min);
    const high = Number(closing.max);
    if (!raw || !Number.isFinite(value) || value < low || value > high) {
      showAlert(closing.field === 'donation' ?
        `Please enter an amount from ${money(low)} to ${money(high)}.` :
        `Please enter a number from ${low} to ${high}.`);
      ui.closingInput.setAttribute('aria-invalid', 'true');
      ui.closingInput.focus();
      return;
    }
    ui.closingInput.removeAttribute('aria-invalid');
    await post('/close', {value});
  }

  /** The answers, or the 1-based numbers of the questions still missing or out of range. */
  function collectAnswers() {
    const answers = {};
    const missing = [];
    surveyItems(page.state).forEach((item, index) => {
      const node = ui.surveyItems.children[index];
      let value = null;
      if (isNumberItem(item)) {
        const input = node.querySelector('input');
        const raw = input.value.trim();
        const number = Number(raw);
        const inRange = (item.min === undefined || item.min === null || number >= item.min) &&
          (item.max === undefined || item.max === null || number <= item.max);
        if (raw && Number.isFinite(number) && inRange) value = number;
      } else {
        const checked = node.querySelector('input:checked');
        if (checked) value = Number.parseInt(checked.value, 10);
      }
      if (value === null) {
        missing.push(index + 1);
        node.setAttribute('aria-invalid', 'true');
        node.classList.add('survey-item-missing');
      } else {
        answers[item.id] = value;
        node.removeAttribute('aria-invalid');
        node.classList.remove('survey-item-missing');
      }
    });
    return {answers, missing};
  }

  async function submitSurvey() {
    const {answers, missing} = collectAnswers();
    if (missing.length) {
      showAlert(`Please answer every question (missing or out of range: ${missing.join(', ')}).`);
      const first = ui.surveyItems.querySelector('.survey-item-missing input');
      if (first) first.focus();
      return;
    }
    await post('/survey', {answers});
  }

  async function refresh() {
    try {
      page.state = await api('GET', '');
    } catch (err) {
      reportError(err);
    }
  }

  // ---- Wiring ----

  ui.startButton.addEventListener('click', () => post('/start'));
  ui.messageForm.addEventListener('submit', (event) => {
    event.preventDefault();
    sendMessage();
  });
  ui.messageInput.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      sendMessage();
    }
  });
  ui.messageInput.addEventListener('input', updateCounter);
  ui.closingForm.addEventListener('submit', (event) => {
    event.preventDefault();
    close();
  });
  ui.continueButton.addEventListener('click', () => {
    page.holdChat = false;
    clearAlert();
    render(page.state);
  });
  ui.closingInput.addEventListener('input', () => ui.closingInput.removeAttribute('aria-invalid'));
  // An item marked unanswered loses the mark once it is answered.
  ui.surveyItems.addEventListener('input', (event) => {
    const item = event.target.closest('.survey-item');
    if (item && event.target.value.trim()) {
      item.removeAttribute('aria-invalid');
      item.classList.remove('survey-item-missing');
    }
  });
  ui.surveyForm.addEventListener('submit', (event) => {
    event.preventDefault();
    submitSurvey();
  });

  async function load() {
    if (!page.token) {
      ui.loading.hidden = true;
      showAlert('This link is incomplete. Please open the full link you were given.');
      return;
    }
    try {
      render(await api('GET', ''));
    } catch (err) {
      ui.loading.hidden = true;
      reportError(err);
    }
  }

  load();
})();
