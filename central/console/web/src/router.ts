// Hash routes (#/vms/<node>/<id>), so any page or item can be linked to and
// central serves one file for all of them.
import { useEffect, useState } from "preact/hooks";

export function go(path: string) {
  location.hash = "#" + path;
}

export function useRoute(): string[] {
  const parse = () => (location.hash.replace(/^#\/?/, "") || "overview").split("/").map(decodeURIComponent);
  const [parts, setParts] = useState(parse);
  useEffect(() => {
    const on = () => setParts(parse());
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return parts;
}
