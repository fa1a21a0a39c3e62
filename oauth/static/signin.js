// The login page's proof of work. A sign-in attempt that carries one is
// held back only by the failures of other attempts that carried one
// (domain/throttle.go), so a script polling the form from many addresses
// cannot keep the owner out. On submit, it finds a number n such that
// SHA-256 of "<challenge>|<email>|<n>" starts with the page's number of
// zero bits (the email trimmed, in lower case, as the server reads it),
// puts n in the form and submits it. Without this script (or WebCrypto)
// the form posts as before, with no proof.
"use strict";
(function () {
  const form = document.querySelector("form[data-work-bits]");
  if (!form || !window.crypto || !crypto.subtle || !window.TextEncoder) {
    return;
  }
  const bits = Number(form.dataset.workBits);
  const challenge = form.elements.namedItem("work_challenge").value;
  const work = form.elements.namedItem("work");
  const status = document.getElementById("work-status");
  let solving = false;
  form.addEventListener("submit", async function (event) {
    if (work.value) {
      return;
    }
    event.preventDefault();
    if (solving) {
      return;
    }
    solving = true;
    if (status) {
      status.textContent = "Signing in…";
    }
    const email = form.elements.namedItem("email").value.trim().toLowerCase();
    work.value = await solve(challenge + "|" + email + "|", bits);
    form.submit();
  });

  // solve hashes candidates in batches: WebCrypto answers each digest
  // asynchronously, and a batch keeps it busy without freezing the page.
  async function solve(prefix, bits) {
    const encoder = new TextEncoder();
    const batch = 512;
    for (let start = 0; ; start += batch) {
      const digests = [];
      for (let n = start; n < start + batch; n++) {
        digests.push(crypto.subtle.digest("SHA-256", encoder.encode(prefix + n)));
      }
      const done = await Promise.all(digests);
      for (let i = 0; i < done.length; i++) {
        if (leadingZeroBits(new Uint8Array(done[i])) >= bits) {
          return String(start + i);
        }
      }
    }
  }

  function leadingZeroBits(bytes) {
    let zeros = 0;
    for (const b of bytes) {
      if (b !== 0) {
        return zeros + Math.clz32(b) - 24;
      }
      zeros += 8;
    }
    return zeros;
  }
})();
