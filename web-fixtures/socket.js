// The websocket to Weft: reconnects with backoff and tells the app when it is up again,
// so a running turn can be resumed with `resume_chat`.

export class WeftSocket {
  constructor(onFrame, onState) {
    this.onFrame = onFrame;
    this.onState = onState;
    this.backoff = 250;
    this.queue = [];
    this.connect();
  }

  url() {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const key = new URLSearchParams(location.search).get("api_key") || localStorage.getItem("weft_api_key");
    return `${proto}://${location.host}/ws${key ? `?api_key=${encodeURIComponent(key)}` : ""}`;
  }

  connect() {
    this.ws = new WebSocket(this.url());
    this.ws.onopen = () => {
      this.backoff = 250;
      this.onState("up");
      for (const frame of this.queue.splice(0)) this.ws.send(frame);
    };
    this.ws.onmessage = (e) => {
      try { this.onFrame(JSON.parse(e.data)); } catch (err) { console.error("bad frame", err); }
    };
    this.ws.onclose = () => {
      this.onState("down");
      setTimeout(() => this.connect(), this.backoff);
      this.backoff = Math.min(this.backoff * 2, 5000);
    };
  }

  send(frame) {
    const text = JSON.stringify(frame);
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(text);
    else this.queue.push(text);
  }

  /// Drop the connection (used to test and to recover from a stuck socket).
  drop() { this.ws.close(); }
}
