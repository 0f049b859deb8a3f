// NEXT_FONT_GOOGLE_MOCKED_RESPONSES for building LangChain's front ends offline: every
// Google Fonts stylesheet their `next/font/google` asks for is answered with one local
// face (Debian's DejaVu Sans, from fonts-dejavu-core), so `next build` needs no network.
const face = (weight) =>
  "@font-face { font-family: 'Inter'; font-style: normal; font-weight: " + weight + ";" +
  " font-display: swap; src: url(/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf) format('truetype'); }";
module.exports = new Proxy({}, { get: () => face("100 900") });
