// Parameters documents made by the Python library (test/fixtures/parameters.json), and a document resealed with
// a new id after a change, as an altered document would be by someone who recomputes the hash.

import { readFileSync } from 'node:fs';

import { parametersId, parseParameters } from '../../src/index.js';

export const documents = JSON.parse(readFileSync(new URL('../fixtures/parameters.json', import.meta.url), 'utf8'));

/** The version-2 text of `text` after `change(document)` on its parsed JSON, with the id of the new content. */
export async function resealed(text, change) {
  const document = JSON.parse(text);
  change(document);
  const fields = parseParameters(JSON.stringify({ ...document, id: '' }));
  document.id = await parametersId(fields);
  return JSON.stringify(document);
}
