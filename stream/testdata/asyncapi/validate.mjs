// Validates an AsyncAPI document with the AsyncAPI project's parser:
// node validate.mjs DOC.json. Prints every diagnostic; exits 1 when one is
// an error (severity 0) or the document does not parse.
import { readFileSync } from 'node:fs';
import { Parser } from '@asyncapi/parser';

const text = readFileSync(process.argv[2], 'utf8');
const { document, diagnostics } = await new Parser().parse(text);
let errors = 0;
for (const d of diagnostics) {
  console.log(`severity=${d.severity} code=${d.code} path=${d.path.join('.')} ${d.message}`);
  if (d.severity === 0) errors++;
}
if (!document || errors > 0) {
  console.log(`INVALID: ${errors} errors`);
  process.exit(1);
}
console.log(`VALID: AsyncAPI ${document.version()}, ${document.channels().length} channels, ${document.operations().length} operations`);
