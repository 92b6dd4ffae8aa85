// noVNC ships no types; the console uses RFB through a few calls.
declare module "@novnc/novnc/lib/rfb.js" {
  const RFB: any;
  export default RFB;
}
